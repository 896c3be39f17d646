"""What other apps read of the storage."""

from __future__ import annotations

from apps.core.drivers import DriverError
from apps.storage.drivers import ddn
from apps.storage.models import TenantStorage


def quota_usage(tenant) -> dict[str, int]:
    """The tenant's storage quota, which its directory holds (``apps.tenancy.quotas``)."""
    storage = TenantStorage.objects.filter(tenant=tenant).values_list("quota_gb", flat=True).first()
    return {"storage_gb": storage or 0}


def directory_fill(tenant) -> dict | None:
    """How full the tenant's directory is, as DDN counts it (a driver call, which may
    raise ``DriverError``): ``used_gb`` (rounded up) of ``quota_gb``, and the exact
    ``percent``; ``None`` without a ready directory. Seed 001 section 4.7.2's "DDN
    storage quota" warnings watch this."""
    storage = TenantStorage.objects.filter(tenant=tenant, status=TenantStorage.Status.READY).first()
    if storage is None:
        return None
    used, size = ddn.driver().used_bytes(storage.path), storage.quota_gb * ddn.GB
    percent = 100.0 * used / size if size else (100.0 if used else 0.0)
    return {"used_gb": -(-used // ddn.GB), "quota_gb": storage.quota_gb, "percent": round(percent, 1)}


def directory_latencies():
    """Each ready tenant directory's latency as DDN reports it: ``(tenant, ms)`` pairs,
    ``ms`` None where the driver could not say (the alert keeps its last value)."""
    for storage in TenantStorage.objects.filter(status=TenantStorage.Status.READY).select_related("tenant"):
        try:
            yield storage.tenant, ddn.driver().latency_ms(storage.path)
        except DriverError:
            yield storage.tenant, None
