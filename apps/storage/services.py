"""Tenant storage on DDN Lustre with InfiniBand isolation (seed 001 section 4.5.2):
directory with quota, NodeMap of allowed nodes, and a UFM PKey per tenant."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from apps.core import audit
from apps.core.drivers import DriverError
from apps.storage.drivers import ddn, ufm
from apps.storage.models import TenantStorage
from apps.tenancy import policy
from apps.tenancy.models import Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

FIRST_PKEY = 0x0100


def quota_for_tier(tier: str) -> int:
    return settings.STORAGE_TIER_QUOTA_GB.get(tier, settings.STORAGE_TIER_QUOTA_GB["standard"])


def _reserve(tenant: Tenant, tier: str, quota_gb: int) -> TenantStorage:
    existing = TenantStorage.objects.filter(tenant=tenant).first()
    if existing is not None:
        return existing
    for _ in range(5):
        highest = TenantStorage.objects.aggregate(top=Max("pkey"))["top"]
        pkey = f"{(int(highest, 16) + 1) if highest else FIRST_PKEY:04x}"
        try:
            with transaction.atomic():
                return TenantStorage.objects.create(
                    tenant=tenant,
                    tier=tier,
                    path=f"/lustre/{tenant.tenant_id}/",
                    nodemap=f"nm-{tenant.tenant_id}",
                    pkey=pkey,
                    quota_gb=quota_gb,
                )
        except IntegrityError:
            existing = TenantStorage.objects.filter(tenant=tenant).first()
            if existing is not None:
                return existing  # a concurrent call reserved it; else the pkey was taken: try the next
    raise DriverError("could not reserve a free PKey")


def provision_tenant_storage(
    tenant: Tenant, *, tier: str | None = None, quota_gb: int | None = None
) -> TenantStorage:
    """Idempotent: re-running converges the DDN/UFM state on the record."""
    tier = tier or tenant.tier
    storage = _reserve(tenant, tier, quota_gb or quota_for_tier(tier))
    if storage.status == TenantStorage.Status.READY:
        return storage
    try:
        ddn.driver().create_directory(storage.path, storage.quota_gb)
        ddn.driver().create_nodemap(storage.nodemap, storage.path)
        ufm.driver().create_pkey(storage.pkey)
    except DriverError as exc:
        TenantStorage.objects.filter(pk=storage.pk).update(status_reason=str(exc))
        raise
    TenantStorage.objects.filter(pk=storage.pk).update(status=TenantStorage.Status.READY, status_reason="")
    storage.refresh_from_db()
    audit.record(
        None, "storage.provision", target=storage, details={"path": storage.path, "pkey": storage.pkey}
    )
    return storage


def create_tenant_storage(
    principal: Principal, tenant: Tenant, *, tier: str | None, quota_gb: int | None
) -> tuple[TenantStorage, bool]:
    """``POST /api/storage/tenant``: idempotent per tenant."""
    policy.require(principal, Perm.STORAGE_MANAGE, tenant)
    existed = TenantStorage.objects.filter(tenant=tenant).exists()
    storage = provision_tenant_storage(tenant, tier=tier, quota_gb=quota_gb)
    return storage, not existed


def attach_node(tenant_pk, node) -> dict:
    storage = TenantStorage.objects.get(tenant_id=tenant_pk)
    if node.ib_guid:
        ufm.driver().add_guids(storage.pkey, [node.ib_guid])
    ddn.driver().add_node(storage.nodemap, node.hostname)
    return {"pkey": storage.pkey, "nodemap": storage.nodemap, "path": storage.path}


def detach_node(tenant_pk, node) -> None:
    storage = TenantStorage.objects.filter(tenant_id=tenant_pk).first()
    if storage is None:
        return
    ddn.driver().remove_node(storage.nodemap, node.hostname)
    if node.ib_guid:
        ufm.driver().remove_guids(storage.pkey, [node.ib_guid])
