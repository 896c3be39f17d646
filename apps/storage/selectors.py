"""What other apps read of the storage."""

from __future__ import annotations

from apps.storage.models import TenantStorage


def quota_usage(tenant) -> dict[str, int]:
    """The tenant's storage quota, which its directory holds (``apps.tenancy.quotas``)."""
    storage = TenantStorage.objects.filter(tenant=tenant).values_list("quota_gb", flat=True).first()
    return {"storage_gb": storage or 0}
