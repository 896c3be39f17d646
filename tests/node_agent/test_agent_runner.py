"""The agent's loop with a real agent process: what it cannot run is reported
with a reason, and a credential the platform no longer accepts stops it."""

from __future__ import annotations

import pytest

from apps.allocations.models import Node
from apps.runtime.models import AppInstance
from node_agent.runner import EXIT_UNAUTHORIZED
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def launch_and_wait_for_failure(api, allocator, project, allocation, app: str) -> AppInstance:
    api.force_login(allocator)
    response = api.post(
        f"/api/v1/projects/{project.pk}/app-instances",
        {"app": app, "allocation_id": str(allocation.pk)},
        format="json",
    )
    assert response.status_code == 202, response.content
    failed = AppInstance.objects.filter(pk=response.json()["instance_id"], state="failed")
    return wait_for(failed.first, what="the launch failing")


def test_a_compose_app_on_a_process_only_node_fails_with_a_reason(
    api, allocator, project, vllm, active_allocation, node_agent
):
    instance = launch_and_wait_for_failure(api, allocator, project, active_allocation, "vllm-openai")
    assert "this node's agent has no container engine" in instance.state_reason
    # The agent logs the outcome once its report is answered, which may be after the
    # instance shows as failed here.
    wait_for(
        lambda: "failed: this node's agent has no container engine" in node_agent.log(),
        what="the agent logging the failure",
    )


def test_a_revoked_credential_stops_the_agent(active_allocation, node_agent):
    node = active_allocation.node
    placeholder = "0" * 64  # set by the active_allocation fixture until the real agent enrolls
    wait_for(
        lambda: (
            Node.objects.filter(pk=node.pk, credential_hash__gt="")
            .exclude(credential_hash=placeholder)
            .exists()
        ),
        what="enrollment",
    )
    Node.objects.filter(pk=node.pk).update(credential_hash="")  # an operator revoked it
    assert node_agent.process.wait(timeout=30) == EXIT_UNAUTHORIZED
    assert "does not accept this node's credential" in node_agent.log()


def test_a_node_without_a_recorded_address_fails_its_starts_with_a_reason(
    api, allocator, project, jupyterlab, active_allocation, node_agent
):
    """An agent enrolled before the platform recorded addresses has nowhere to publish."""
    node = active_allocation.node
    wait_for(lambda: "enrolled as" in node_agent.log(), what="enrollment")
    Node.objects.filter(pk=node.pk).update(agent_address=None)
    instance = launch_and_wait_for_failure(api, allocator, project, active_allocation, "jupyterlab")
    assert (
        "the platform has no address for this node's agent; enroll the agent again" in instance.state_reason
    )
