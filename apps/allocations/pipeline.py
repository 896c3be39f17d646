"""The provisioning pipeline: network -> OS deploy -> storage -> agent -> ACTIVE,
and its undoing (at release, or as compensation when a step fails for good).

State lives in the database (``Allocation`` and its ``AllocationStep`` rows),
never in the task chain: ``advance`` can be called any number of times, by any
worker, and resumes at the recorded step. A lease on the allocation row keeps
two workers from running the same allocation at once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.allocations import events, nodes
from apps.allocations.drivers import agent, maas
from apps.allocations.lease import Lease
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.core import audit
from apps.core.drivers import CircuitBreaker, DriverError
from apps.networking import services as networking
from apps.networking.drivers import ndfc
from apps.storage import services as storage

logger = logging.getLogger(__name__)
State = Allocation.State
Status = AllocationStep.Status
Phase = AllocationStep.Phase


@dataclass
class Done:
    output: dict = field(default_factory=dict)


@dataclass
class Wait:
    seconds: float
    note: str = ""


Outcome = Done | Wait


# --- provisioning steps ------------------------------------------------------


def _network(allocation: Allocation, step: AllocationStep) -> Outcome:
    vrf = networking.vrf_for(allocation)
    # Recorded before the call, so undoing a failed or half-done attach also
    # detaches from this VRF (see _network_detach).
    step.output = {"vrf": vrf.name}
    step.save(update_fields=["output"])
    return Done({**step.output, **ndfc.driver().attach(allocation.node, vrf.name, networking.vlan_map(vrf))})


def _os_deploy(allocation: Allocation, step: AllocationStep) -> Outcome:
    machines = maas.driver()
    node = allocation.node
    if not step.output.get("deploy_requested"):
        system_id = machines.allocate(node)
        machines.deploy(node, allocation.os_image, agent.cloud_init(allocation))
        step.output = {"deploy_requested": True, "system_id": system_id}
        step.save(update_fields=["output"])
    status = machines.status(node)
    if status == maas.DEPLOYED:
        return Done({**step.output, "status": status})
    if status == maas.FAILED_DEPLOYMENT:
        raise DriverError(
            f"MAAS could not deploy {node.hostname} ({allocation.os_image})", hardware=True, transient=False
        )
    return Wait(settings.PIPELINE_POLL_SECONDS, f"MAAS: {status}")


def _storage(allocation: Allocation, step: AllocationStep) -> Outcome:
    return Done(storage.attach_node(allocation.tenant_id, allocation.node))


def _agent(allocation: Allocation, step: AllocationStep) -> Outcome:
    if agent.registered(allocation.node, since=step.started_at):
        return Done({"agent": "healthy"})
    return Wait(settings.PIPELINE_POLL_SECONDS, "waiting for the node agent to register")


# --- release / compensation steps ---------------------------------------------


def _drain(allocation: Allocation, step: AllocationStep) -> Outcome:
    if not allocation.drain:
        return Done({"skipped": "release asked not to drain"})
    remaining = agent.drain(allocation)
    if remaining:
        return Wait(settings.PIPELINE_POLL_SECONDS, f"waiting for {remaining} app instance(s) to stop")
    return Done({"drained": True})


def _access_revoke(allocation: Allocation, step: AllocationStep) -> Outcome:
    remaining = agent.revoke_access(allocation)
    if remaining:
        return Wait(settings.PIPELINE_POLL_SECONDS, f"waiting for the node to drop {remaining} login key(s)")
    return Done({"keys_revoked": True})


def _storage_detach(allocation: Allocation, step: AllocationStep) -> Outcome:
    storage.detach_node(allocation.tenant_id, allocation.node)
    return Done()


def _os_release(allocation: Allocation, step: AllocationStep) -> Outcome:
    machines = maas.driver()
    if not step.output.get("release_requested"):
        machines.release(allocation.node, erase=allocation.erase_disk)
        step.output = {"release_requested": True, "erase": allocation.erase_disk}
        step.save(update_fields=["output"])
    status = machines.status(allocation.node)
    if status == maas.READY:
        return Done({**step.output, "status": status})
    return Wait(settings.PIPELINE_POLL_SECONDS, f"MAAS: {status}")


def _network_detach(allocation: Allocation, step: AllocationStep) -> Outcome:
    # The VRF the attach used, not a fresh vrf_for(): that can name another VRF
    # by now, and detaching from it would leave the port on the tenant's network.
    # Only network steps of older allocations that failed before the VRF was recorded lack it.
    attached = allocation.steps.get(phase=Phase.PROVISION, name="network").output.get("vrf")
    ndfc.driver().detach(allocation.node, attached or networking.vrf_for(allocation).name)
    return Done()


@dataclass(frozen=True)
class StepSpec:
    name: str
    run: Callable[[Allocation, AllocationStep], Outcome]
    progress: int  # percent reached when the step succeeds
    undoes: str | None = None  # the provisioning step this release step gives back


PROVISION = [
    StepSpec("network", _network, 30),
    StepSpec("os_deploy", _os_deploy, 70),
    StepSpec("storage", _storage, 85),
    StepSpec("agent", _agent, 100),
]
RELEASE = [
    StepSpec("drain", _drain, 20, undoes="agent"),
    # Before the node goes back: nobody may log in to a node that is no longer theirs.
    StepSpec("access_revoke", _access_revoke, 30, undoes="agent"),
    StepSpec("storage_detach", _storage_detach, 40, undoes="storage"),
    StepSpec("os_release", _os_release, 80, undoes="os_deploy"),
    StepSpec("network_detach", _network_detach, 100, undoes="network"),
]
SPECS = {Phase.PROVISION: PROVISION, Phase.RELEASE: RELEASE}
BREAKER = CircuitBreaker("bm-provisioning", **settings.PIPELINE_BREAKER)


def create_steps(allocation: Allocation) -> None:
    AllocationStep.objects.bulk_create(
        AllocationStep(allocation=allocation, phase=phase, name=spec.name, position=position)
        for phase, specs in SPECS.items()
        for position, spec in enumerate(specs)
    )


# --- driving ------------------------------------------------------------------


def advance(allocation_id) -> float | None:
    """Run the allocation as far as it can go now.

    Returns seconds until it should be looked at again, or None when there is
    nothing left to do (or another worker holds it).
    """
    lease = Lease.take(allocation_id)
    if lease is None:
        return None
    wait: float | None = None
    try:
        with lease:
            wait = _run(allocation_id, lease)
        return wait
    finally:
        lease.give_back(wait)


def _run(allocation_id, lease: Lease) -> float | None:
    while not lease.lost:
        allocation = Allocation.objects.select_related("node", "tenant", "project", "flavor").get(
            pk=allocation_id
        )
        if allocation.state == State.PENDING:
            _transition(allocation, State.PROVISIONING)
            continue
        if allocation.state == State.PROVISIONING:
            if allocation.abort_requested:
                _fail(
                    allocation, allocation.failure_reason or "aborted before it became active", hardware=False
                )
                continue
            phase = Phase.PROVISION
        elif allocation.state == State.RELEASING or (
            allocation.state == State.FAILED and allocation.compensating
        ):
            phase = Phase.RELEASE
        else:
            return None
        step = _next_step(allocation, phase)
        if step is None:
            _finish_phase(allocation, phase)
            continue
        outcome = _execute(allocation, step, phase)
        if isinstance(outcome, Wait):
            return outcome.seconds
    return None


def _next_step(allocation: Allocation, phase: str) -> AllocationStep | None:
    return (
        allocation.steps.filter(phase=phase)
        .exclude(status__in=[Status.SUCCEEDED, Status.COMPENSATED])
        .order_by("position")
        .first()
    )


def _spec(phase: str, name: str) -> StepSpec:
    return next(spec for spec in SPECS[phase] if spec.name == name)


def _execute(allocation: Allocation, step: AllocationStep, phase: str) -> Outcome | None:
    spec = _spec(phase, step.name)
    now = timezone.now()
    if phase == Phase.RELEASE and spec.undoes and not _needs_undo(allocation, spec.undoes):
        step.status, step.finished_at = Status.COMPENSATED, now
        step.output = {"skipped": f"{spec.undoes} never ran"}
        step.save(update_fields=["status", "finished_at", "output"])
        return Done()
    if step.status in (Status.PENDING, Status.FAILED):
        step.attempts += 1
        step.status = Status.RUNNING
        step.started_at = step.started_at or now
        step.error = ""
        step.save(update_fields=["attempts", "status", "started_at", "error"])
        Allocation.objects.filter(pk=allocation.pk).update(step=step.name, updated_at=now)
        events.allocation_changed(allocation.pk)
    budget = settings.PIPELINE_STEP_BUDGETS[step.name]
    elapsed = (now - step.started_at).total_seconds()
    if elapsed > budget:
        return _step_failed(
            allocation,
            step,
            phase,
            DriverError(
                f"step {step.name} took {elapsed:.1f} s, over its {budget} s budget", transient=False
            ),
        )
    if BREAKER.is_open():
        return Wait(BREAKER.retry_after(), "circuit open: the provisioning backends are failing")
    try:
        outcome = spec.run(allocation, step)
    except DriverError as exc:
        BREAKER.record_failure()
        return _step_failed(allocation, step, phase, exc)
    if isinstance(outcome, Done):
        step.status, step.finished_at, step.error = Status.SUCCEEDED, timezone.now(), ""
        step.output = outcome.output
        step.save(update_fields=["status", "finished_at", "error", "output"])
        Allocation.objects.filter(pk=allocation.pk).update(progress=spec.progress, updated_at=timezone.now())
        events.allocation_changed(allocation.pk)
    return outcome


def _needs_undo(allocation: Allocation, provision_step: str) -> bool:
    return (
        allocation.steps.filter(phase=Phase.PROVISION, name=provision_step)
        .exclude(status=Status.PENDING)
        .exists()
    )


def _step_failed(allocation: Allocation, step: AllocationStep, phase: str, exc: DriverError) -> Outcome:
    step.status, step.error = Status.FAILED, str(exc)
    step.save(update_fields=["status", "error"])
    retries_left = exc.transient and step.attempts <= settings.PIPELINE_MAX_RETRIES
    logger.warning(
        "allocation %s step %s attempt %s failed: %s", allocation.pk, step.name, step.attempts, exc
    )
    if retries_left:
        base, ceiling = settings.PIPELINE_BACKOFF_SECONDS
        delay = min(ceiling, base * 2 ** (step.attempts - 1))
        return Wait(delay * random.uniform(0.8, 1.2), f"retrying {step.name}")
    reason = f"{step.name} failed after {step.attempts} attempt(s): {exc}"
    if phase == Phase.PROVISION:
        _fail(allocation, reason, hardware=exc.hardware)
        return Done()
    # Undoing failed for good: leave the node to an operator rather than reuse dirty hardware.
    step.status = Status.FAILED
    _park_node(allocation, Node.State.FAILED, f"release step {reason}")
    Allocation.objects.filter(pk=allocation.pk).update(compensating=False, updated_at=timezone.now())
    if allocation.state == State.RELEASING:
        _transition(allocation, State.FAILED, failure_reason=f"release {reason}")
    return Done()


def _fail(allocation: Allocation, reason: str, *, hardware: bool) -> None:
    """Fail the allocation now; what earlier steps took is given back by the release steps."""
    with transaction.atomic():
        changed = _transition(
            allocation, State.FAILED, failure_reason=reason, compensating=True, hardware_fault=hardware
        )
        if changed:
            Node.objects.filter(pk=allocation.node_id).update(state=Node.State.RELEASING, state_reason=reason)


def _finish_phase(allocation: Allocation, phase: str) -> None:
    with transaction.atomic():
        if phase == Phase.PROVISION:
            if _transition(allocation, State.ACTIVE, progress=100, step="", activated_at=timezone.now()):
                Node.objects.filter(pk=allocation.node_id).update(state=Node.State.ALLOCATED, state_reason="")
            return
        if allocation.state == State.RELEASING:
            _transition(allocation, State.RELEASED, step="", finished_at=timezone.now())
        else:
            Allocation.objects.filter(pk=allocation.pk).update(
                compensating=False, step="", updated_at=timezone.now()
            )
            events.allocation_changed(allocation.pk)
        if allocation.hardware_fault:
            _park_node(allocation, Node.State.FAILED, allocation.failure_reason)
        else:
            _park_node(allocation, Node.State.AVAILABLE, "")


def _park_node(allocation: Allocation, state: str, reason: str) -> None:
    Node.objects.filter(pk=allocation.node_id).update(
        state=state, state_reason=reason, updated_at=timezone.now()
    )
    nodes.revoke_agent(allocation)
    if state == Node.State.FAILED:
        audit.record(
            None,
            "node.failed",
            target=allocation.node,
            details={"reason": reason, "allocation": str(allocation.pk)},
        )


def _transition(allocation: Allocation, new_state: str, **changes) -> bool:
    """Move to ``new_state`` only from the state we read (the UPDATE checks it)."""
    previous = allocation.state
    now = timezone.now()
    changed = Allocation.objects.filter(pk=allocation.pk, state=previous).update(
        state=new_state, updated_at=now, **changes
    )
    if changed:
        allocation.state = new_state
        for key, value in changes.items():
            setattr(allocation, key, value)
        events.state_changed(allocation, previous)
    return bool(changed)
