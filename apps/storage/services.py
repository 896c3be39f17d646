"""Tenant storage on DDN Lustre with InfiniBand isolation (seed 001 section 4.5.2):
directory with quota, NodeMap of allowed nodes, and a UFM PKey per tenant."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from apps.core import audit
from apps.core.drivers import DriverError
from apps.core.errors import InvalidState, Unavailable, ValidationFailed
from apps.storage.drivers import ddn, ufm
from apps.storage.models import StorageResize, TenantStorage
from apps.tenancy import policy, quotas
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
        ddn.driver().create_directory(storage.path, storage.quota_gb, storage.project_id)
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
    call that finishes it answers as its creator. A ``quota_gb`` other than the
    ready directory's resizes it (``resize_tenant_storage``).
    """
    policy.require(principal, Perm.STORAGE_MANAGE, tenant)
    existed = TenantStorage.objects.filter(tenant=tenant, status=TenantStorage.Status.READY).exists()
    if existed and quota_gb is not None:
        return resize_tenant_storage(principal, tenant, quota_gb), False
    if quota_gb is not None and not TenantStorage.objects.filter(tenant=tenant).exists():
        with quotas.denials_audited(principal, "storage.provision", tenant), transaction.atomic():
            quotas.enforce(tenant, {"storage_gb": quota_gb})
    try:
        storage = provision_tenant_storage(tenant, tier=tier, quota_gb=quota_gb, principal=principal)
    except DriverError as exc:
        # DDN or UFM failing (or its circuit open) is the backends' trouble, not the
        # request's: 503 tells CCP to retry, and the retry resumes the record reserved here.
        raise Unavailable(
            f"Tenant storage could not be provisioned now: {exc}", retry_after=RETRY_AFTER
        ) from exc
    if quota_gb is not None and quota_gb != storage.quota_gb:
        # Reserved by an earlier, failed call at another size: this call's size holds.
        storage = resize_tenant_storage(principal, tenant, quota_gb)
    return storage, not existed


def resize_tenant_storage(principal: Principal, tenant: Tenant, quota_gb: int) -> TenantStorage:
    """Give the tenant's directory a new quota on DDN: growing takes tenant quota
    (``storage_gb``, 422 past it), shrinking may not go below what its files use (400).

    The new size is recorded first, so it counts against the tenant's quota at once
    and two requests cannot both pass on the same headroom; DDN is asked after the
    commit, with nothing locked while it answers. If DDN fails, the record goes back to
    the old size (503). Every call, the size the directory already has too, converges
    DDN on the record: a retry finishes what a crash between the two left.
    """
    policy.require(principal, Perm.STORAGE_MANAGE, tenant)
    storage = TenantStorage.objects.filter(tenant=tenant).first()
    if storage is None or storage.status != TenantStorage.Status.READY:
        raise InvalidState("The tenant's storage is not ready; create it first.")
    change = None
    try:
        if quota_gb < storage.quota_gb:
            _require_room(principal, storage, quota_gb)
        with quotas.denials_audited(principal, "storage.resize", tenant):
            change = _record_size(principal, storage, quota_gb)
        _converge(storage)
    except DriverError as exc:
        if change is not None:
            _undo(change)
        audit.record(
            principal, "storage.resize", target=storage, outcome=audit.FAILURE, details={"reason": str(exc)}
        )
        raise Unavailable(f"Tenant storage could not be resized now: {exc}", retry_after=RETRY_AFTER) from exc
    if change is not None:
        audit.record(
            principal,
            "storage.resize",
            target=storage,
            details={"from_gb": change.from_gb, "to_gb": change.to_gb},
        )
    storage.refresh_from_db()
    return storage


def _require_room(principal: Principal, storage: TenantStorage, quota_gb: int) -> None:
    used = ddn.driver().used_bytes(storage.path)
    if used <= quota_gb * ddn.GB:
        return
    needed_gb = -(-used // ddn.GB)
    audit.record(
        principal,
        "storage.resize",
        target=storage,
        outcome=audit.DENIED,
        details={"reason": "below_used", "requested_gb": quota_gb, "used_bytes": used},
    )
    raise ValidationFailed(
        "The new quota is smaller than what the tenant's files take.",
        details={"quota_gb": [f"{used} bytes are in use; the quota may not go below {needed_gb} GB."]},
    )


def _record_size(principal: Principal, storage: TenantStorage, quota_gb: int) -> StorageResize | None:
    with transaction.atomic():
        current = TenantStorage.objects.select_for_update().get(pk=storage.pk)
        if quota_gb == current.quota_gb:
            return None
        if quota_gb > current.quota_gb:
            quotas.enforce(current.tenant, {"storage_gb": quota_gb - current.quota_gb})
        change = StorageResize.objects.create(
            storage=current,
            from_gb=current.quota_gb,
            to_gb=quota_gb,
            resized_at=timezone.now(),
            resized_by=principal.name,
        )
        TenantStorage.objects.filter(pk=current.pk).update(quota_gb=quota_gb, updated_at=timezone.now())
    return change


def _converge(storage: TenantStorage) -> None:
    """DDN at the recorded size; asked again when another resize recorded a new size
    while DDN answered, so the last one recorded is the one DDN keeps."""
    for _ in range(3):
        size = TenantStorage.objects.values_list("quota_gb", flat=True).get(pk=storage.pk)
        ddn.driver().set_quota(storage.path, size)
        if TenantStorage.objects.filter(pk=storage.pk, quota_gb=size).exists():
            return
    raise DriverError("the directory's size kept changing while DDN was asked")


def _undo(change: StorageResize) -> None:
    with transaction.atomic():
        # Only while no later resize followed: that one's converging sets DDN anyway.
        if TenantStorage.objects.filter(pk=change.storage_id, quota_gb=change.to_gb).update(
            quota_gb=change.from_gb, updated_at=timezone.now()
        ):
            change.delete()


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
