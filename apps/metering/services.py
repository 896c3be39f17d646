"""Quotas as metering reports them (with the 80/90 % warnings and their crossings)
and billing corrections."""

from __future__ import annotations

import logging
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.utils import timezone

from apps.core import audit, bounds
from apps.core.drivers import DriverError
from apps.core.errors import InvalidState, ValidationFailed
from apps.metering import signals
from apps.metering.models import BillingAdjustment, BillingExport, QuotaCrossing, QuotaLevel
from apps.metering.usage import period
from apps.storage import selectors as storage
from apps.tenancy import policy, quotas
from apps.tenancy.models import Project, Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

logger = logging.getLogger(__name__)

LEVELS = ("none", "80", "90")
# How full the tenant's directory is on DDN: watched like a quota, not one CCP sets.
STORAGE_FILL = "storage_used_gb"
ADJUSTMENT_MAX = Decimal(10) ** 12
# A tenant's crossings that cleared, kept as history (the admin lists them); an app
# launched and deleted in a loop next to a threshold crosses it every time.
CLEARED_CROSSINGS_KEPT = 200
REASON_MAX = 1000


def quota_report(tenant) -> dict[str, dict]:
    """Per resource: limit, used, percent, warning (CONTRACT.md ``GET /api/metering/quota``)."""
    limits = quotas.limits_of(tenant)
    used = quotas.usage_of(tenant)
    report = {}
    for resource in sorted(set(limits) | set(used)):
        limit = limits.get(resource)
        amount = used.get(resource, 0)
        percent = round(100.0 * amount / limit, 1) if limit else (100.0 if amount else 0.0)
        report[resource] = {
            "limit": limit,
            "used": amount,
            "percent": percent,
            "warning": quotas.warning_level(percent) if limit is not None else "none",
        }
    return report


def storage_fill(tenant) -> dict | None:
    """The tenant directory's use of its size, as a quota line (GB, rounded up):
    ``None`` without a directory or while DDN cannot say (``DriverError``, logged)."""
    try:
        fill = storage.directory_fill(tenant)
    except DriverError as exc:
        logger.warning("DDN could not say how full %s's directory is: %s", tenant.tenant_id, exc)
        return None
    if fill is None:
        return None
    return {
        "limit": fill["quota_gb"],
        "used": fill["used_gb"],
        "percent": fill["percent"],
        "warning": quotas.warning_level(fill["percent"]),
    }


def update_quota(principal, tenant, values: dict) -> dict[str, int]:
    """CCP quota sync: validated, audited, effective for the very next request."""
    policy.require(principal, Perm.QUOTA_MANAGE, tenant)
    if not isinstance(values, dict) or not values:
        raise ValidationFailed(details={"non_field_errors": ["Send an object of resource: limit."]})
    errors = quotas.validate_quota(values)
    if errors:
        raise ValidationFailed(details=errors)
    with transaction.atomic():
        limits = quotas.set_quota(tenant, values)
        audit.record(principal, "quota.update", target=tenant, details={"limits": values})
    check_quota_thresholds(tenant)
    return limits


# --- the 80 % and 90 % warnings (seed 001 section 4.6.3) ----------------------------------


def check_quota_thresholds(tenant) -> list[QuotaCrossing]:
    """Follow each limited resource's warning level: a rise past 80 % or 90 % records
    a ``QuotaCrossing`` and sends ``quota_threshold_crossed``, once; a fall below a
    crossed level clears it and sends ``quota_threshold_cleared``, arming it again.
    Safe to run at any time and from any number of workers (the level moves by a
    conditional UPDATE, so one of them records a move). Answers the crossings raised."""
    lines = quota_report(tenant)
    fill = storage_fill(tenant)  # asked of DDN before the transaction: no lock waits on it
    if fill is not None:
        lines[STORAGE_FILL] = fill
    raised = []
    with transaction.atomic():
        for resource, line in lines.items():
            if line["limit"] is not None:
                crossing = _follow(tenant, resource, line)
                if crossing is not None:
                    raised.append(crossing)
    return raised


def _follow(tenant, resource: str, line: dict) -> QuotaCrossing | None:
    level = line["warning"]
    state, _ = QuotaLevel.objects.get_or_create(tenant=tenant, resource=resource)
    previous = state.level
    if previous == level:
        return None
    if not QuotaLevel.objects.filter(pk=state.pk, level=previous).update(
        level=level, updated_at=timezone.now()
    ):
        return None  # another check recorded this move
    figures = {"percent": line["percent"], "used": line["used"], "limit": line["limit"]}
    if LEVELS.index(level) > LEVELS.index(previous):
        crossing = QuotaCrossing.objects.create(tenant=tenant, resource=resource, level=level, **figures)
        signal, raised = signals.quota_threshold_crossed, crossing
    else:
        cleared = QuotaCrossing.objects.filter(
            tenant=tenant,
            resource=resource,
            cleared_at__isnull=True,
            level__in=LEVELS[LEVELS.index(level) + 1 :],
        )
        crossing = cleared.order_by("-created_at").first()
        cleared.update(cleared_at=timezone.now())
        history = QuotaCrossing.objects.filter(tenant=tenant, cleared_at__isnull=False)
        bounds.keep_newest(history, CLEARED_CROSSINGS_KEPT, by="created_at")
        signal, raised = signals.quota_threshold_cleared, None
    rule = "storage_quota" if resource == STORAGE_FILL else "quota"
    transaction.on_commit(
        lambda: signal.send(
            sender=QuotaCrossing,
            tenant=tenant,
            resource=resource,
            level=level,
            previous=previous,
            rule=rule,
            crossing=crossing,
            **figures,
        )
    )
    return raised


def tenants_with_limits():
    return Tenant.objects.filter(quotas__isnull=False).distinct()


# --- corrections after an export --------------------------------------------------------------


def record_adjustment(
    principal: Principal,
    tenant: Tenant,
    *,
    month: str,
    amount,
    reason: str,
    project_id: str | None = None,
) -> BillingAdjustment:
    """A correction of an exported month (``month`` YYYY-MM): a signed ``amount`` (a
    negative one is a credit) with its ``reason``, audited, and listed in the next
    month exported. The exported month itself never changes (decision 0051)."""
    policy.require(principal, Perm.BILLING_ADJUST, tenant)
    start, _ = period(month)
    value, project, reason = _adjustment_fields(tenant, amount, reason, project_id)
    if not BillingExport.objects.filter(tenant=tenant, period=start.date()).exists():
        raise InvalidState(
            f"{month} has not been exported: its usage is billed as measured, nothing to correct."
        )
    with transaction.atomic():
        adjustment = BillingAdjustment.objects.create(
            tenant=tenant,
            project=project,
            period=start.date(),
            amount=value,
            reason=reason,
            created_by=principal.name,
        )
        audit.record(
            principal,
            "billing.adjust",
            target=adjustment,
            details={"period": month, "amount": str(value), "reason": reason, "project_id": project_id},
        )
    return adjustment


def _adjustment_fields(tenant, amount, reason, project_id) -> tuple[Decimal, Project | None, str]:
    errors: dict[str, list[str]] = {}
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value == 0 or value != value.quantize(Decimal("0.01")):
        errors["amount"] = ["A non-zero amount with at most 2 decimals (negative: a credit)."]
    elif abs(value) >= ADJUSTMENT_MAX:
        errors["amount"] = [f"Less than {ADJUSTMENT_MAX} in absolute value."]
    reason = (reason or "").strip()
    if not reason or len(reason) > REASON_MAX:
        errors["reason"] = [f"Say why, in at most {REASON_MAX} characters."]
    project = None
    if project_id:
        project = Project.objects.filter(tenant=tenant, project_id=project_id).first()
        if project is None:
            errors["project_id"] = [f"The tenant has no project {project_id!r}."]
    if errors:
        raise ValidationFailed(details=errors)
    return value, project, reason
