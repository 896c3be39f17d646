from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Sum

from apps.allocations.models import Allocation
from apps.core import audit
from apps.core.errors import ValidationFailed
from apps.metering.models import Quota
from apps.storage.models import TenantStorage
from apps.tenancy import policy
from apps.tenancy.roles import Perm

DEFAULT_QUOTA = {"gpus": 64, "nodes": 8, "storage_gb": 10240}


def default_quota() -> dict[str, int]:
    return dict(getattr(settings, "DEFAULT_TENANT_QUOTA", None) or DEFAULT_QUOTA)


QUOTA_MAX = 2**63 - 1  # what the database keeps (BigIntegerField)


def validate_quota(values: dict) -> dict[str, list[str]]:
    errors = {}
    for resource, limit in values.items():
        if not isinstance(resource, str) or not resource.replace("_", "").isalnum() or len(resource) > 64:
            errors[str(resource)] = ["Resource names are letters, digits and '_' (at most 64)."]
        elif isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= QUOTA_MAX:
            errors[resource] = [f"Must be a whole number from 0 to {QUOTA_MAX}."]
    return errors


@transaction.atomic
def set_quota(tenant, values: dict[str, int]) -> dict[str, int]:
    """Upsert the tenant's limits; resources not named keep their limit."""
    for resource, limit in values.items():
        Quota.objects.update_or_create(tenant=tenant, resource=resource, defaults={"limit": limit})
    return limits_of(tenant)


def limits_of(tenant) -> dict[str, int]:
    return dict(Quota.objects.filter(tenant=tenant).values_list("resource", "limit"))


def usage_of(tenant) -> dict[str, int]:
    """What the tenant holds now: live allocations' GPUs and nodes, its storage quota."""
    live = Allocation.objects.filter(tenant=tenant, state__in=Allocation.LIVE_STATES).aggregate(
        gpus=Sum("gpus"), nodes=Count("id")
    )
    storage = TenantStorage.objects.filter(tenant=tenant).values_list("quota_gb", flat=True).first()
    return {"gpus": live["gpus"] or 0, "nodes": live["nodes"] or 0, "storage_gb": storage or 0}


def warning_level(percent: float) -> str:
    if percent >= 90:
        return "90"
    if percent >= 80:
        return "80"
    return "none"


def quota_report(tenant) -> dict[str, dict]:
    """Per resource: limit, used, percent, warning (CONTRACT.md ``GET /api/metering/quota``)."""
    limits = limits_of(tenant)
    used = usage_of(tenant)
    report = {}
    for resource in sorted(set(limits) | set(used)):
        limit = limits.get(resource)
        amount = used.get(resource, 0)
        percent = round(100.0 * amount / limit, 1) if limit else (100.0 if amount else 0.0)
        report[resource] = {
            "limit": limit,
            "used": amount,
            "percent": percent,
            "warning": warning_level(percent) if limit is not None else "none",
        }
    return report


def check(tenant, requested: dict[str, int]) -> tuple[dict[str, dict], dict | None]:
    """Itemize the request against the limits: ``(items, first_exceeded)``.

    A resource without a limit record is not limited.
    """
    limits = limits_of(tenant)
    used = usage_of(tenant)
    items, exceeded = {}, None
    for resource, amount in requested.items():
        limit = limits.get(resource)
        after = used.get(resource, 0) + amount
        items[resource] = {"used": used.get(resource, 0), "limit": limit, "requested": amount, "after": after}
        if limit is not None and after > limit and exceeded is None:
            exceeded = {
                "resource": resource,
                "limit": limit,
                "used": used.get(resource, 0),
                "requested": amount,
            }
    return items, exceeded


def update_quota(principal, tenant, values: dict) -> dict[str, int]:
    """CCP quota sync: validated, audited, effective for the very next request."""
    policy.require(principal, Perm.QUOTA_MANAGE, tenant)
    if not isinstance(values, dict) or not values:
        raise ValidationFailed(details={"non_field_errors": ["Send an object of resource: limit."]})
    errors = validate_quota(values)
    if errors:
        raise ValidationFailed(details=errors)
    with transaction.atomic():
        limits = set_quota(tenant, values)
        audit.record(principal, "quota.update", target=tenant, details={"limits": values})
    return limits
