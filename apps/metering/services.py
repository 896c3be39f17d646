from __future__ import annotations

from django.db import transaction

from apps.core import audit
from apps.core.errors import ValidationFailed
from apps.tenancy import policy, quotas
from apps.tenancy.roles import Perm


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
    return limits
