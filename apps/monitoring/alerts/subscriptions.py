"""Alert subscriptions (CONTRACT ``POST /api/alerts/subscribe``): a tenant's, seeing
only that tenant's alerts, or platform-wide (CCP, no tenant) seeing every alert; of
the severities listed. A tenant caller subscribes and sees only its own tenant.

The secret that signs a subscription's deliveries is kept in the secrets store and read
in one place, ``signing_secret``, which the webhooks outbox calls when it signs.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.core import audit, bounds, secrets
from apps.core.errors import Conflict, ValidationFailed
from apps.monitoring.models import Alert, AlertRule, AlertSubscription
from apps.tenancy import policy
from apps.tenancy import selectors as tenancy
from apps.tenancy import services as tenancy_services
from apps.tenancy.models import Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm
from apps.webhooks import receivers
from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery

SEVERITIES = [AlertRule.Severity.WARNING.value, AlertRule.Severity.CRITICAL.value]
# A tenant fills this table; each row is a receiver every alert of the tenant goes to.
MAX_PER_TENANT = 20


def signing_secret(subscription_id: str) -> str | None:
    """The one reader of subscription secrets (the webhooks outbox's signer)."""
    path = AlertSubscription.objects.filter(pk=subscription_id).values_list("secret_path", flat=True).first()
    return secrets.read_named(path)


def visible(principal: Principal) -> QuerySet:
    policy.require_somewhere(principal, Perm.ALERT_MANAGE)
    return policy.restrict(AlertSubscription.objects.select_related("tenant"), principal, Perm.ALERT_MANAGE)


def _tenant(principal: Principal, tenant_id: str | None) -> Tenant | None:
    """The subscribing tenant: the one named (if the caller may see it), the caller's
    only tenant when none is named, or None (platform-wide) for a platform caller."""
    if tenant_id:
        return tenancy.tenant_for(principal, tenant_id)
    if principal.can(Perm.ALERT_MANAGE, None):  # a platform grant: every tenant's alerts
        return None
    tenants = principal.tenant_ids()
    if len(tenants) != 1:
        raise ValidationFailed(details={"tenant_id": ["Name the tenant whose alerts to subscribe to."]})
    return Tenant.objects.get(pk=next(iter(tenants)))


def public_only(tenant_id) -> bool:
    """Whether a subscription's receiver must be on a public address: a tenant's URL
    must be reachable on the internet, since the platform posts to it from inside its
    own network, where a private address would be someone else's. Platform-wide
    subscriptions are made by platform callers, trusted as the operator's CCP URL is."""
    return tenant_id is not None and not settings.ALERT_PRIVATE_URLS


def _check_url(url: str, *, public: bool) -> None:
    """Early feedback; each delivery checks again (the name may answer otherwise then)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailed(details={"url": ["An http or https URL."]})
    if not public:
        return
    try:
        receivers.checked_addresses(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except receivers.Unresolved:
        raise ValidationFailed(details={"url": ["The host does not resolve."]}) from None
    except receivers.Refused:
        raise ValidationFailed(details={"url": ["The host resolves to a private address."]}) from None


def subscribe(
    principal: Principal, *, url: str, secret: str, tenant_id: str | None = None, severities=None
) -> AlertSubscription:
    tenant = _tenant(principal, tenant_id)
    policy.require_scope(principal, Perm.ALERT_MANAGE, tenant.pk if tenant else None)
    if tenant is not None:
        tenancy_services.require_not_suspended(tenant)
    _check_url(url, public=public_only(tenant.pk if tenant else None))
    with transaction.atomic():
        if tenant is not None:
            bounds.require_room(
                tenant,
                AlertSubscription.objects.filter(tenant=tenant),
                MAX_PER_TENANT,
                resource="alert_subscriptions",
                message=f"A tenant has at most {MAX_PER_TENANT} alert subscriptions; delete one first.",
            )
        subscription = AlertSubscription(
            tenant=tenant,
            url=url,
            severities=sorted(set(severities or SEVERITIES), key=SEVERITIES.index),
            created_by=principal.audit_actor,
        )
        subscription.secret_path = AlertSubscription.path_for(subscription.pk)
        # Written before the record commits, as every owner of a secret does (apps/core/secrets).
        secrets.store().write(subscription.secret_path, secret)
        subscription.save(force_insert=True)
        audit.record(
            principal,
            "alert_subscription.create",
            target=subscription,
            tenant_id=tenant.pk if tenant else None,
            details={"url": url, "severities": subscription.severities},
        )
    return subscription


def get(principal: Principal, subscription_id) -> AlertSubscription:
    return policy.get_object(
        AlertSubscription.objects.select_related("tenant"), principal, Perm.ALERT_MANAGE, pk=subscription_id
    )


def unsubscribe(principal: Principal, subscription_id) -> None:
    subscription = get(principal, subscription_id)
    with transaction.atomic():
        audit.record(
            principal,
            "alert_subscription.delete",
            target=subscription,
            tenant_id=subscription.tenant_id,
            details={"url": subscription.url},
        )
        subscription.delete()


def test_send(principal: Principal, subscription_id) -> Delivery:
    """A sample alert to this subscription alone, signed as real ones are, so its
    owner can check the receiver before a real alert depends on it."""
    subscription = get(principal, subscription_id)
    if subscription.tenant is not None:
        tenancy_services.require_not_suspended(subscription.tenant)
    now = timezone.now().isoformat().replace("+00:00", "Z")
    body = {
        "event_id": str(uuid.uuid4()),
        "alert_id": str(uuid.uuid4()),
        "rule": "test",
        "severity": subscription.severities[-1] if subscription.severities else "warning",
        "state": "firing",
        "tenant_id": subscription.tenant.tenant_id if subscription.tenant else None,
        "project_id": None,
        "node_id": None,
        "hostname": None,
        "gpu": None,
        "value": 0,
        "threshold": 0,
        "started_at": now,
        "resolved_at": None,
        "summary": "Test alert: this subscription receives the platform's alerts.",
    }
    with transaction.atomic():
        # One test at a time: each is a delivery a worker sends up to six times, and a
        # tenant sending them as fast as the API allows could occupy every worker with a
        # slow receiver. The row lock lets two tests at once not both find none pending.
        AlertSubscription.objects.select_for_update().filter(pk=subscription.pk).first()
        if Delivery.objects.filter(signer=str(subscription.pk), status=Delivery.Status.PENDING).exists():
            raise Conflict(
                "A delivery to this receiver is still pending; its outcome shows whether it works."
            )
        delivery = webhooks.enqueue(
            webhooks.ALERT,
            subscription.url,
            body,
            tenant_id=subscription.tenant_id,
            signer=str(subscription.pk),
            public_only=public_only(subscription.tenant_id),
        )
        audit.record(
            principal, "alert_subscription.test", target=subscription, tenant_id=subscription.tenant_id
        )
    return delivery


def matching(alert: Alert, receivers: list[AlertSubscription]) -> list[AlertSubscription]:
    """Of ``receivers``, the platform-wide subscriptions and the alert's tenant's, of its severity."""
    return [
        s
        for s in receivers
        if (s.tenant_id is None or s.tenant_id == alert.tenant_id) and alert.severity in s.severities
    ]
