"""Every provisioning step failing for good: the allocation fails with a reason
naming the step, and what earlier steps took is given back."""

from __future__ import annotations

import pytest

from apps.allocations import services
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.core import simulation
from apps.tenancy import principal as principals
from tests.support.fleet import allocated, failed_release, fault

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_retries(settings):
    settings.PIPELINE_BACKOFF_SECONDS = (0.0, 0.0)
    settings.PIPELINE_POLL_SECONDS = 0.01


def taken(node) -> dict:
    """What the simulated systems still hold for the node."""
    machine = simulation.get("maas", "machine", node.hostname)
    nodemap = simulation.get("ddn", "nodemap", "nm-acme")
    pkey = simulation.get("ufm", "pkey", nodemap and "0100")
    return {
        "port": simulation.get("ndfc", "port", node.hostname) is not None,
        "machine": machine.state["status"] if machine else None,
        "nodemap": bool(nodemap and node.hostname in nodemap.state["nodes"]),
        "pkey": bool(pkey and node.ib_guid in pkey.state["guids"]),
    }


NOTHING = {"port": False, "machine": None, "nodemap": False, "pkey": False}


@pytest.mark.parametrize(
    ("system", "operation", "failed_step", "left_behind"),
    [
        ("ndfc", "attach", "network", NOTHING),
        ("maas", "deploy", "os_deploy", {**NOTHING, "machine": "Ready"}),
        ("ddn", "add_node", "storage", {**NOTHING, "machine": "Ready", "pkey": False}),
    ],
)
def test_step_failing_for_good_fails_allocation_and_gives_back(
    allocator, project, nodes, django_capture_on_commit_callbacks, system, operation, failed_step, left_behind
):
    fault(system, operation, message=f"{operation} exploded")
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)

    assert allocation.state == Allocation.State.FAILED
    assert allocation.failure_reason.startswith(f"{failed_step} failed after 4 attempt(s)")
    assert f"{operation} exploded" in allocation.failure_reason
    assert not allocation.compensating
    node = allocation.node
    node.refresh_from_db()
    assert node.state == Node.State.AVAILABLE  # not the hardware's fault: back to the pool
    assert taken(node) == left_behind
    step = allocation.steps.get(phase="provision", name=failed_step)
    assert step.status == AllocationStep.Status.FAILED
    assert step.attempts == 4


def test_agent_that_never_registers_fails_on_its_time_budget(
    settings, allocator, project, nodes, django_capture_on_commit_callbacks
):
    nodes[0].credential_hash = "x" * 64  # a real agent is expected, and it stays silent
    nodes[0].save()
    settings.PIPELINE_STEP_BUDGETS = {**settings.PIPELINE_STEP_BUDGETS, "agent": 0.3}
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.FAILED
    assert "step agent took" in allocation.failure_reason
    assert "0.3 s budget" in allocation.failure_reason
    assert taken(allocation.node) == {**NOTHING, "machine": "Ready"}


def test_hung_deploy_fails_on_budget_and_releases_machine(
    settings, allocator, project, nodes, django_capture_on_commit_callbacks
):
    settings.PIPELINE_STEP_BUDGETS = {**settings.PIPELINE_STEP_BUDGETS, "os_deploy": 0.3}
    fault("maas", "deploy", mode="hang")
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.FAILED
    assert "step os_deploy took" in allocation.failure_reason
    assert taken(allocation.node)["machine"] == "Ready"
    assert taken(allocation.node)["port"] is False


def test_transient_failure_is_retried_and_leaves_no_stale_error(
    allocator, project, nodes, django_capture_on_commit_callbacks
):
    fault("maas", "deploy", remaining=2, message="BMC timeout")
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.ACTIVE
    assert allocation.failure_reason == ""
    step = allocation.steps.get(phase="provision", name="os_deploy")
    assert step.attempts == 3
    assert step.error == ""
    assert step.status == "succeeded"


def test_hardware_fault_parks_node_for_an_operator(
    allocator, project, nodes, django_capture_on_commit_callbacks
):
    fault("maas", "deploy", hardware=True, message="PXE boot failed: no link")
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.FAILED
    node = allocation.node
    node.refresh_from_db()
    assert node.state == Node.State.FAILED
    assert "PXE boot failed" in node.state_reason
    assert taken(node)["port"] is False  # still compensated


def test_failed_release_step_parks_node_and_operator_retry_completes(
    allocator, project, nodes, platform_admin, django_capture_on_commit_callbacks
):
    allocation = failed_release(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.FAILED
    assert "network_detach failed" in allocation.failure_reason
    allocation.node.refresh_from_db()
    assert allocation.node.state == Node.State.FAILED

    from apps.core.models import SimulatedFault

    SimulatedFault.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True):
        services.retry_failed_step(principals.for_user(platform_admin), allocation)
    allocation.node.refresh_from_db()
    assert allocation.node.state == Node.State.AVAILABLE
    assert taken(allocation.node)["port"] is False


def test_owner_aborts_in_flight_allocation(allocator, project, nodes, django_capture_on_commit_callbacks):
    owner = principals.for_user(allocator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        [allocation] = services.allocate(owner, project, flavor_name="h100-8x", os_image="ubuntu-22.04")
    services.release(owner, allocation)  # still PENDING: this aborts
    for callback in callbacks:
        callback()
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.FAILED
    assert allocation.failure_reason == f"aborted by {owner.name}"
    allocation.node.refresh_from_db()
    assert allocation.node.state == Node.State.AVAILABLE
