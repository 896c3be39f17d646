"""Operator changes to alert rules, alert listing for callers, and measurements
reported by other parts of the platform for the rules that watch them."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.core import audit
from apps.core.errors import NotFound, ValidationFailed
from apps.monitoring.alerts import rules
from apps.monitoring.models import Alert, AlertRule, Measurement
from apps.tenancy import policy
from apps.tenancy import selectors as tenancy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

LISTED_STATES = (Alert.State.FIRING, Alert.State.RESOLVED)


def change_rule(
    principal: Principal, name: str, *, threshold=None, for_seconds=None, enabled=None
) -> AlertRule:
    """An operator changes a rule (``alert_rule NAME``; the admin); audited."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().filter(name=name).first()
        if rule is None:
            raise NotFound(f"No alert rule {name!r}.")
        if for_seconds is not None and for_seconds < 0:
            raise ValidationFailed(details={"for": ["0 seconds or more."]})
        before = {"threshold": rule.threshold, "for_seconds": rule.for_seconds, "enabled": rule.enabled}
        for field, value in (("threshold", threshold), ("for_seconds", for_seconds), ("enabled", enabled)):
            if value is not None:
                setattr(rule, field, value)
        rule.save()
        after = {"threshold": rule.threshold, "for_seconds": rule.for_seconds, "enabled": rule.enabled}
        audit.record(principal, "alert_rule.change", target=rule, details={"before": before, "after": after})
    return rule


def visible_alerts(
    principal: Principal, *, tenant_id: str | None = None, state: str | None = None
) -> QuerySet:
    """``GET /api/alerts``: the alerts that fired (pending ones were never sent) that
    the caller may see, of one tenant (CCP id) and state when given."""
    policy.require_somewhere(principal, Perm.ALERT_VIEW)
    alerts = Alert.objects.filter(state__in=LISTED_STATES).select_related("tenant", "project", "rule")
    if state:
        if state not in LISTED_STATES:
            raise ValidationFailed(details={"state": ["firing or resolved."]})
        alerts = alerts.filter(state=state)
    if tenant_id:
        tenant = tenancy.tenant_for(principal, tenant_id)
        alerts = alerts.filter(tenant=tenant)
    return policy.restrict(alerts, principal, Perm.ALERT_VIEW).order_by("-started_at", "-created_at")


def delete_resolved(now=None) -> int:
    """Delete the alerts resolved over ``ALERT_RETENTION_DAYS`` ago; how many. Open
    alerts stay however old. Nothing points at an alert: its webhooks carry their own
    copy of it, so what was delivered (or is still to send) is unchanged."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.ALERT_RETENTION_DAYS)
    return Alert.objects.filter(state=Alert.State.RESOLVED, resolved_at__lt=cutoff).delete()[0]


def record_measurement(
    metric: str, subject: str, value: float, *, tenant=None, node=None, label: str = ""
) -> None:
    """The latest value of a metric the GPU telemetry does not carry; the next round
    compares it with the rules on that metric."""
    if metric not in rules.MEASURED:
        raise ValueError(f"{metric} is not a measured alert metric")
    Measurement.objects.update_or_create(
        metric=metric,
        subject=subject,
        defaults={
            "value": float(value),
            "tenant": tenant,
            "node": node,
            "label": label,
            "at": timezone.now(),
        },
    )


def on_quota_level(sender, *, tenant, resource: str, rule: str, percent, **figures) -> None:
    """Receiver of metering's quota threshold signals (``quota_threshold_crossed`` and
    ``quota_threshold_cleared``, connected in ``MonitoringConfig.ready``): the tenant's
    use of that resource, for the ``storage_quota`` and ``quota`` rules."""
    record_measurement(rule, f"{tenant.pk}:{resource}", percent, tenant=tenant, label=resource)
