"""Allocation operations shared by the CCP API, the platform API, the portal and the admin."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.allocations import events, pipeline, selectors
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.catalog.models import Flavor
from apps.core import audit, wakeups
from apps.core.errors import Conflict, InvalidState, NotFound, ValidationFailed
from apps.networking import services as networking
from apps.tenancy import policy, quotas
from apps.tenancy import services as tenancy
from apps.tenancy.models import Project, Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

MAX_COUNT = 64
State = Allocation.State


@dataclass
class AllocationPlan:
    """What an allocation request would do (``dry_run``), or why it cannot."""

    allowed: bool
    quota: dict
    free_nodes: int
    requested: int
    reason: str = ""
    exceeded: dict | None = None


def schedulable_nodes(flavor: Flavor) -> QuerySet[Node]:
    return Node.objects.filter(flavor=flavor, state=Node.State.AVAILABLE, approved=True)


def _validate(flavor_name: str, os_image: str, count: int, *, tenant_id=None, network_id: str = "") -> Flavor:
    errors = {}
    flavor = Flavor.objects.filter(name=flavor_name).first()
    if flavor is None:
        errors["flavor"] = [f"Unknown flavor {flavor_name!r}."]
    if os_image not in settings.OS_IMAGES:
        errors["os_image"] = [f"Choose one of {', '.join(settings.OS_IMAGES)}."]
    if not 1 <= count <= MAX_COUNT:
        errors["count"] = [f"Between 1 and {MAX_COUNT}."]
    # Checked now: the network step would put the node on the tenant's first VRF
    # instead, and a VPC of that name created later would change which VRF the
    # allocation names.
    if network_id and not networking.has_vpc(tenant_id, network_id):
        errors["network_id"] = [f"The tenant has no VPC {network_id!r}; create it first."]
    if errors:
        raise ValidationFailed(details=errors)
    return flavor


def plan(tenant: Tenant, flavor: Flavor, count: int) -> AllocationPlan:
    items, exceeded = quotas.check(tenant, {"gpus": flavor.gpus_per_node * count, "nodes": count})
    free = schedulable_nodes(flavor).count()
    reason = tenancy.refusal_reason(tenant, onboarded=True)
    if not reason and exceeded:
        reason = (
            f"Quota exceeded for {exceeded['resource']}: {exceeded['used']} used of {exceeded['limit']}, "
            f"{exceeded['requested']} requested."
        )
    elif not reason and free < count:
        reason = f"Only {free} free {flavor.name} node(s); {count} requested."
    return AllocationPlan(
        allowed=not reason, quota=items, free_nodes=free, requested=count, reason=reason, exceeded=exceeded
    )


def preview(
    principal: Principal,
    project: Project,
    *,
    flavor_name: str,
    os_image: str,
    network_id: str = "",
    count: int = 1,
) -> AllocationPlan:
    """``dry_run``: the checks of ``allocate`` (the request, quota and capacity), taking nothing."""
    policy.require(principal, Perm.ALLOCATION_MANAGE, project)
    flavor = _validate(flavor_name, os_image, count, tenant_id=project.tenant_id, network_id=network_id)
    return plan(project.tenant, flavor, count)


def allocate(
    principal: Principal,
    project: Project,
    *,
    flavor_name: str,
    os_image: str,
    network_id: str = "",
    count: int = 1,
) -> list[Allocation]:
    """Reserve ``count`` nodes for the project (all or nothing) and start provisioning.

    The tenant row lock serializes quota use per tenant; ``SKIP LOCKED`` lets
    concurrent requests of other tenants pick different nodes without waiting.
    """
    policy.require(principal, Perm.ALLOCATION_MANAGE, project)
    flavor = _validate(flavor_name, os_image, count, tenant_id=project.tenant_id, network_id=network_id)
    with quotas.denials_audited(principal, "allocation.create", project):
        return _reserve(principal, project, flavor, os_image, network_id, count)


def _reserve(
    principal: Principal, project: Project, flavor: Flavor, os_image: str, network_id: str, count: int
) -> list[Allocation]:
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=project.tenant_id)
        tenancy.require_not_suspended(tenant, onboarded=True)
        quotas.enforce(tenant, {"gpus": flavor.gpus_per_node * count, "nodes": count})
        nodes = list(
            schedulable_nodes(flavor).select_for_update(skip_locked=True).order_by("hostname")[:count]
        )
        if len(nodes) < count:
            raise Conflict(
                f"No free {flavor.name} node: {len(nodes)} of {count} could be reserved.",
                details={"flavor": flavor.name, "requested": count, "available": len(nodes)},
            )
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(
            state=Node.State.PROVISIONING, updated_at=timezone.now()
        )
        allocations = []
        for node in nodes:
            allocation = Allocation.objects.create(
                node=node,
                tenant=tenant,
                project=project,
                flavor=flavor,
                gpus=flavor.gpus_per_node,
                os_image=os_image,
                network_id=network_id,
                requested_by=principal.name,
                step="reserve",
                progress=10,
            )
            pipeline.create_steps(allocation)
            audit.record(
                principal,
                "allocation.create",
                target=allocation,
                details={"node": node.hostname, "flavor": flavor.name, "os_image": os_image},
            )
            events.allocation_changed(allocation.pk)
            allocations.append(allocation)
        transaction.on_commit(lambda: [_start(a.pk) for a in allocations])
    return allocations


def _start(allocation_id) -> None:
    from apps.allocations.tasks import advance_allocation

    wakeups.wake(advance_allocation, str(allocation_id))


def release(
    principal: Principal, allocation: Allocation, *, drain: bool = True, erase_disk: bool = False
) -> Allocation:
    """Give the node back: drain, undo every step, ``RELEASED``. An allocation still
    provisioning is aborted (compensated like a failure). Repeating it is harmless."""
    policy.require(principal, Perm.ALLOCATION_MANAGE, allocation)
    with transaction.atomic():
        current = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if current.state in (State.RELEASING, State.RELEASED):
            return current
        if current.state == State.FAILED:
            raise InvalidState("The allocation failed; there is nothing to release.")
        if current.state in (State.PENDING, State.PROVISIONING):
            current.abort_requested = True
            current.failure_reason = f"aborted by {principal.name}"
            current.save(update_fields=["abort_requested", "failure_reason", "updated_at"])
            audit.record(principal, "allocation.abort", target=current)
        else:
            previous = current.state
            current.state, current.step, current.progress = State.RELEASING, "drain", 0
            current.drain, current.erase_disk = drain, erase_disk
            current.released_by = principal.name
            fields = ["state", "step", "progress", "drain", "erase_disk", "released_by", "updated_at"]
            current.save(update_fields=fields)
            Node.objects.filter(pk=current.node_id).update(
                state=Node.State.RELEASING, updated_at=timezone.now()
            )
            audit.record(
                principal,
                "allocation.release",
                target=current,
                details={"drain": drain, "erase_disk": erase_disk},
            )
            events.state_changed(current, previous)
        transaction.on_commit(lambda: _start(current.pk))
    return current


def for_node(principal: Principal, node_id) -> Allocation:
    """The caller's most recent allocation of a node (404 when it has none)."""
    allocation = (
        policy.restrict(Allocation.objects.filter(node_id=node_id), principal, Perm.ALLOCATION_VIEW)
        .select_related("tenant", "project", "flavor")
        .order_by("-created_at")
        .first()
    )
    if allocation is None:
        # Asking about a node one never held is probing, recorded as get_object records it.
        policy.record_out_of_scope(principal, Node, node_id, Node.objects.filter(pk=node_id))
        raise NotFound("No allocation of this node is visible to you.")
    return allocation


def retry_failed_step(principal: Principal, allocation: Allocation) -> Allocation:
    """Operator action: a release/compensation step that failed for good is tried again."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        failed = allocation.steps.filter(status=AllocationStep.Status.FAILED)
        if not failed.exists():
            raise InvalidState("No failed step to retry.")
        names = list(failed.values_list("name", flat=True))
        failed.update(status=AllocationStep.Status.PENDING, attempts=0, started_at=None, error="")
        if allocation.state == State.FAILED:
            Allocation.objects.filter(pk=allocation.pk).update(compensating=True, updated_at=timezone.now())
            Node.objects.filter(pk=allocation.node_id).update(state=Node.State.RELEASING)
        audit.record(principal, "allocation.retry_step", target=allocation, details={"steps": names})
        transaction.on_commit(lambda: _start(allocation.pk))
    allocation.refresh_from_db()
    return allocation


def fail_allocation(principal: Principal, allocation: Allocation, reason: str) -> Allocation:
    """Operator action: stop an in-flight allocation and give back what it took."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    if allocation.state not in (State.PENDING, State.PROVISIONING):
        raise InvalidState(f"Only a provisioning allocation can be failed, not {allocation.state}.")
    with transaction.atomic():
        Allocation.objects.filter(pk=allocation.pk).update(
            abort_requested=True, failure_reason=f"failed by operator: {reason}", updated_at=timezone.now()
        )
        audit.record(principal, "allocation.fail", target=allocation, details={"reason": reason})
        transaction.on_commit(lambda: _start(allocation.pk))
    allocation.refresh_from_db()
    return allocation


def reconcile_stuck(now=None) -> int:
    """Resume allocations whose worker died or whose wake-up was lost (beat).

    Every step is safe to repeat, so a stuck allocation (``selectors.stuck``)
    simply runs again.
    """
    ids = list(Allocation.objects.filter(selectors.stuck(now)).values_list("id", flat=True)[:500])
    for allocation_id in ids:
        _start(allocation_id)
    return len(ids)
