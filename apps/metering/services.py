from __future__ import annotations

from django.conf import settings
from django.db import transaction

from apps.metering.models import Quota

DEFAULT_QUOTA = {"gpus": 64, "nodes": 8, "storage_gb": 10240}


def default_quota() -> dict[str, int]:
    return dict(getattr(settings, "DEFAULT_TENANT_QUOTA", None) or DEFAULT_QUOTA)


def validate_quota(values: dict) -> dict[str, list[str]]:
    errors = {}
    for resource, limit in values.items():
        if not isinstance(resource, str) or not resource.replace("_", "").isalnum() or len(resource) > 64:
            errors[str(resource)] = ["Resource names are letters, digits and '_' (at most 64)."]
        elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            errors[resource] = ["Must be a whole number, 0 or more."]
    return errors


@transaction.atomic
def set_quota(tenant, values: dict[str, int]) -> dict[str, int]:
    """Upsert the tenant's limits; resources not named keep their limit."""
    for resource, limit in values.items():
        Quota.objects.update_or_create(tenant=tenant, resource=resource, defaults={"limit": limit})
    return limits_of(tenant)


def limits_of(tenant) -> dict[str, int]:
    return dict(Quota.objects.filter(tenant=tenant).values_list("resource", "limit"))
