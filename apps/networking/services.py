"""Tenant networks: VRFs (each with four VLANs) taken from a pre-created pool."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core import audit, wakeups
from apps.core.errors import Conflict, Unavailable
from apps.networking.models import Vlan, Vrf
from apps.tenancy import policy
from apps.tenancy.models import Tenant
from apps.tenancy.onboarding import StepFailed
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

POOL_RETRY_AFTER = 60


class PoolEmpty(Unavailable):
    default_message = "The VRF pool is empty; an operator must add capacity."


def _take_free_vrf(tenant: Tenant, vpc_id: str = "") -> Vrf:
    """Assign one free VRF to the tenant; the row lock keeps two tenants off the same VRF."""
    vrf = Vrf.objects.select_for_update(skip_locked=True).filter(tenant__isnull=True).order_by("vni").first()
    if vrf is None:
        raise PoolEmpty(retry_after=POOL_RETRY_AFTER)
    vrf.tenant, vrf.vpc_id, vrf.assigned_at = tenant, vpc_id, timezone.now()
    vrf.save(update_fields=["tenant", "vpc_id", "assigned_at", "updated_at"])
    return vrf


@transaction.atomic
def assign_tenant_network(tenant: Tenant) -> Vrf:
    """Onboarding's network step; a tenant that already has a VRF keeps it."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()  # one onboarding run at a time per tenant
    existing = tenant.vrfs.order_by("assigned_at").first()
    if existing is not None:
        return existing
    vrf = _take_free_vrf(tenant)
    audit.record(None, "network.vrf_assign", target=vrf, tenant_id=tenant.pk, details={"vrf": vrf.name})
    return vrf


def onboarding_step(tenant: Tenant) -> None:
    """Tenant onboarding's network step (``apps.tenancy.onboarding``)."""
    try:
        assign_tenant_network(tenant)
    except PoolEmpty as exc:
        raise StepFailed("network: the VRF pool is empty; waiting for an operator to add capacity") from exc


def create_vpc(principal: Principal, tenant: Tenant, *, vpc_id: str) -> tuple[Vrf, bool]:
    """CCP's VPC: link the tenant's unlinked VRF or take another; idempotent per ``vpc_id``."""
    policy.require(principal, Perm.NETWORK_MANAGE, tenant)
    try:
        with transaction.atomic():
            existing = Vrf.objects.select_for_update().filter(vpc_id=vpc_id).first()
            if existing is not None:
                if existing.tenant_id != tenant.pk:
                    raise Conflict("This vpc_id belongs to another tenant.")
                return existing, False
            vrf = tenant.vrfs.select_for_update().filter(vpc_id="").order_by("assigned_at").first()
            if vrf is not None:
                vrf.vpc_id = vpc_id
                vrf.save(update_fields=["vpc_id", "updated_at"])
            else:
                vrf = _take_free_vrf(tenant, vpc_id)
            audit.record(
                principal,
                "network.vpc_create",
                target=vrf,
                tenant_id=tenant.pk,
                details={"vpc_id": vpc_id, "vrf": vrf.name},
            )
            return vrf, True
    except IntegrityError:
        return Vrf.objects.get(vpc_id=vpc_id), False


def has_vpc(tenant_id, vpc_id: str) -> bool:
    return Vrf.objects.filter(tenant_id=tenant_id, vpc_id=vpc_id).exists()


def vrf_for(allocation) -> Vrf:
    """The VRF an allocation's node joins: the one of its ``network_id`` (VPC), else the tenant's first.

    Allocating refuses a ``network_id`` naming none of the tenant's VPCs; the
    fallback keeps allocations made before that check on the VRF they joined.
    """
    vrfs = Vrf.objects.filter(tenant_id=allocation.tenant_id).prefetch_related("vlans")
    if allocation.network_id:
        vrf = vrfs.filter(vpc_id=allocation.network_id).first()
        if vrf is not None:
            return vrf
    vrf = vrfs.order_by("assigned_at").first()
    if vrf is None:
        raise PoolEmpty(
            "The tenant has no network yet (its VRF is still being assigned).", retry_after=POOL_RETRY_AFTER
        )
    return vrf


def vlan_map(vrf: Vrf) -> dict[str, int]:
    return {vlan.purpose: vlan.vlan_id for vlan in vrf.vlans.all()}


def release_tenant_networks(tenant: Tenant) -> int:
    """Give the tenant's VRFs back to the pool (tenant deletion)."""
    with transaction.atomic():
        count = Vrf.objects.filter(tenant=tenant).update(
            tenant=None, vpc_id="", assigned_at=None, updated_at=timezone.now()
        )
        if count:
            audit.record(None, "network.vrf_release", tenant_id=tenant.pk, details={"count": count})
    return count


def load_pool(
    *, prefix: str, count: int, first_vni: int, first_vlan: int, principal: Principal | None = None
) -> int:
    """Create ``count`` VRFs named ``{prefix}-{n}``, each with four consecutive VLANs.

    Existing names are skipped, so loading the same range twice adds nothing.
    ``principal``: an operator doing it (the admin), checked (outside the
    transaction, so a denial stays recorded) and named in the audit event;
    ``None`` for the platform itself (demo seed, management command).
    """
    if principal is not None:
        policy.require_scope(principal, Perm.NETWORK_MANAGE)
    with transaction.atomic():
        created = 0
        purposes = [p for p, _ in Vlan.Purpose.choices]
        for index in range(count):
            name = f"{prefix}-{index + 1:04d}"
            vrf, made = Vrf.objects.get_or_create(name=name, defaults={"vni": first_vni + index})
            if made:
                created += 1
                for offset, purpose in enumerate(purposes):
                    Vlan.objects.create(vrf=vrf, purpose=purpose, vlan_id=first_vlan + index * 4 + offset)
        if created:
            audit.record(
                principal,
                "network.pool_load",
                target_type="vrf",
                details={"prefix": prefix, "created": created},
            )
            transaction.on_commit(_resume_waiting_tenants)
    return created


def free_vrf_count() -> int:
    return Vrf.objects.filter(tenant__isnull=True).count()


def _resume_waiting_tenants() -> None:
    from apps.tenancy.tasks import resume_onboarding

    wakeups.wake(resume_onboarding)  # or at its next minute on the beat
