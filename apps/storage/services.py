"""Tenant storage on DDN Lustre with InfiniBand isolation (seed 001 section 4.5.2):
directory with quota, NodeMap of allowed nodes, and a UFM PKey per tenant."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from apps.core import audit
from apps.core.drivers import DriverError
from apps.core.errors import Unavailable
from apps.storage.drivers import ddn, ufm
from apps.storage.models import TenantStorage
from apps.tenancy import policy
from apps.tenancy.models import Tenant
from apps.tenancy.onboarding import StepFailed
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

FIRST_PKEY = 0x0100
LAST_PKEY = 0x7FFF  # 15 bits: the top bit of an InfiniBand partition key is membership
# DDN and UFM failures are usually brief; seed 001 section 8.1 has callers back off 1-60 s.
RETRY_AFTER = 30


def quota_for_tier(tier: str) -> int:
    return settings.STORAGE_TIER_QUOTA_GB.get(tier, settings.STORAGE_TIER_QUOTA_GB["standard"])


def _reserve(tenant: Tenant, tier: str, quota_gb: int) -> TenantStorage:
    existing = TenantStorage.objects.filter(tenant=tenant).first()
    if existing is not None:
        return existing
    for _ in range(5):
        # Four hex digits, so the text maximum is the numeric one.
        highest = TenantStorage.objects.aggregate(top=Max("pkey"))["top"]
        number = int(highest, 16) + 1 if highest else FIRST_PKEY
        if number > LAST_PKEY:
            raise DriverError("no free PKey: every partition key up to 0x7fff is given out")
        pkey = f"{number:04x}"
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
    tenant: Tenant,
    *,
    tier: str | None = None,
    quota_gb: int | None = None,
    principal: Principal | None = None,
) -> TenantStorage:
    """Idempotent: re-running converges the DDN/UFM state on the record.

    ``principal``: who asked (CCP through the API), named in the audit event;
    ``None`` for the platform itself (onboarding, demo seed).
    """
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
        audit.record(
            principal,
            "storage.provision",
            target=storage,
            outcome=audit.FAILURE,
            details={"reason": str(exc)},
        )
        raise
    # Conditional, so of two runs converging at once only one records the provisioning.
    made_ready = (
        TenantStorage.objects.filter(pk=storage.pk)
        .exclude(status=TenantStorage.Status.READY)
        .update(status=TenantStorage.Status.READY, status_reason="")
    )
    storage.refresh_from_db()
    if made_ready:
        audit.record(
            principal,
            "storage.provision",
            target=storage,
            details={"path": storage.path, "pkey": storage.pkey},
        )
    return storage


def onboarding_step(tenant: Tenant) -> None:
    """Tenant onboarding's storage step (``apps.tenancy.onboarding``)."""
    try:
        provision_tenant_storage(tenant)
    except DriverError as exc:
        raise StepFailed(f"storage: {exc}", final=not exc.transient) from exc


def create_tenant_storage(
    principal: Principal, tenant: Tenant, *, tier: str | None, quota_gb: int | None
) -> tuple[TenantStorage, bool]:
    """``POST /api/storage/tenant``: idempotent per tenant; ``True`` when this call made it ready.

    A storage record left half-done by an earlier failure is not "existing": the
    call that finishes it answers as its creator.
    """
    policy.require(principal, Perm.STORAGE_MANAGE, tenant)
    existed = TenantStorage.objects.filter(tenant=tenant, status=TenantStorage.Status.READY).exists()
    try:
        storage = provision_tenant_storage(tenant, tier=tier, quota_gb=quota_gb, principal=principal)
    except DriverError as exc:
        # DDN or UFM failing (or its circuit open) is the backends' trouble, not the
        # request's: 503 tells CCP to retry, and the retry resumes the record reserved here.
        raise Unavailable(
            f"Tenant storage could not be provisioned now: {exc}", retry_after=RETRY_AFTER
        ) from exc
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
