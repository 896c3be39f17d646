"""Tenants' quotas: the limits (set at onboarding, synced by CCP) and the check the
domains make before they take a resource.

What a tenant holds now is each domain's to say: the allocations (GPUs, nodes) and
the storage sit above tenancy, so each registers its count in its
``AppConfig.ready()`` (``register_usage``) and this module never imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal

from apps.core import audit
from apps.core.errors import QuotaExceeded
from apps.tenancy.models import Quota, Tenant

DEFAULT_QUOTA = {"gpus": 64, "nodes": 8, "storage_gb": 10240, "app_instances": 64}
QUOTA_MAX = 2**63 - 1  # what the database keeps (BigIntegerField)

# Sent after the commit of a transaction that took quota (``enforce``), with ``tenant``:
# metering follows the 80/90 % warnings on it.
quota_taken = Signal()

_usage_sources: list[Callable[[object], dict[str, int]]] = []


def register_usage(source: Callable[[object], dict[str, int]]) -> None:
    """``source(tenant)``: what the tenant holds now of the resources its domain counts."""
    if source not in _usage_sources:
        _usage_sources.append(source)


def default_quota() -> dict[str, int]:
    return dict(getattr(settings, "DEFAULT_TENANT_QUOTA", None) or DEFAULT_QUOTA)


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
    """What the tenant holds now, as every registered domain counts it."""
    used: dict[str, int] = {}
    for source in _usage_sources:
        used.update(source(tenant))
    return used


def warning_level(percent: float) -> str:
    if percent >= 90:
        return "90"
    if percent >= 80:
        return "80"
    return "none"


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


def enforce(tenant, requested: dict[str, int]) -> Tenant:
    """Take ``requested`` against the limits or raise ``QuotaExceeded`` (422).

    The one place every domain checks before it takes a resource: inside the caller's
    transaction it locks the tenant row, so two requests of one tenant cannot both
    pass on the same headroom; the lock holds until the caller's commit, after its
    new rows count. Answers the locked tenant.
    """
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    _, exceeded = check(locked, requested)
    if exceeded:
        raise QuotaExceeded(
            f"Quota exceeded for {exceeded['resource']}: {exceeded['used']} of {exceeded['limit']} used, "
            f"{exceeded['requested']} requested.",
            details=exceeded,
        )
    transaction.on_commit(lambda: quota_taken.send(sender=Tenant, tenant=locked))
    return locked


@contextmanager
def denials_audited(principal, action: str, target) -> Iterator[None]:
    """Around the transaction that calls ``enforce``: a refusal is audited as
    ``action`` denied once that transaction has rolled back, so the denial stays on
    the trail."""
    try:
        yield
    except QuotaExceeded as exc:
        audit.record(
            principal, action, target=target, outcome=audit.DENIED, details={"reason": "quota", **exc.details}
        )
        raise
