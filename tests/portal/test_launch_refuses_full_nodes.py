"""Launching cannot pick a full node: the launch form marks and disables the nodes
without room for the app, says why the Launch button is off when every node is full
and what to do about it; the server refuses a launch (or a start) on a full node
with the error envelope whatever the page offered. A stopped instance says what it
holds of its node."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.allocations.models import Allocation
from apps.runtime import services
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from tests.factories import AllocationFactory
from tests.support.instances import agent_finishes, fill
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


@pytest.fixture
def second_allocation(project, nodes, active_allocation):
    node = nodes[1] if nodes[1].pk != active_allocation.node_id else nodes[2]
    type(node).objects.filter(pk=node.pk).update(credential_hash="0" * 64, agent_address="127.0.0.1")
    return AllocationFactory(
        node=node, project=project, requested_by="someone", state=Allocation.State.ACTIVE
    )


def launch_page(client, project) -> str:
    return client.get(reverse("app_launch", args=[project.pk, "vllm-openai"])).content.decode()


def option(page: str, allocation) -> str:
    start = page.index(f'<option value="{allocation.pk}"')
    return page[start : page.index("</option>", start)]


def test_a_full_node_is_marked_and_cannot_be_picked(
    client, allocator, project, active_allocation, second_allocation, vllm
):
    fill(allocator, active_allocation, "big-1")
    client.force_login(allocator)
    page = launch_page(client, project)
    full = option(page, active_allocation)
    assert " disabled" in full
    assert "0 of 8 GPUs free · full" in full
    free = option(page, second_allocation)
    assert " disabled" not in free
    assert " selected" in free  # the form starts on a node with room
    assert "A node marked full has fewer than 1 free GPU" in page
    assert f'href="{reverse("instance_list", args=[project.pk])}?state=running"' in page
    assert 'data-launch-blocked="full"' not in page


def test_every_node_full_turns_the_launch_button_off_and_says_what_to_do(
    client, allocator, project, active_allocation, second_allocation, vllm
):
    fill(allocator, active_allocation, "big-1")
    fill(allocator, second_allocation, "big-2")
    client.force_login(allocator)
    page = launch_page(client, project)
    assert 'data-launch-blocked="full"' in page
    assert f"Every node of {project.name} is full" in page
    assert 'disabled aria-describedby="launch-blocked">Launch Vllm-Openai: no node has 1 free GPU<' in page
    assert f'href="{reverse("instance_list", args=[project.pk])}?state=running" data-next="stop"' in page
    assert f'href="{reverse("allocation_create", args=[project.pk])}" data-next="allocate"' in page

    # The page offers nothing, and the server refuses a hand-made launch all the same.
    response = client.post(
        reverse("app_launch", args=[project.pk, "vllm-openai"]),
        {"allocation": str(active_allocation.pk), "version": "1.0.0", "param_tensor_parallel": "1"},
    )
    assert response.status_code == 409
    assert "needs 1 GPU(s); 0 of 8 are free" in response.content.decode()


def test_the_api_refuses_a_launch_on_a_full_node(api, allocator, project, active_allocation, vllm):
    fill(allocator, active_allocation, "big-1")
    api.force_login(allocator)
    response = api.post(
        f"/api/v1/projects/{project.pk}/app-instances",
        {
            "app": "vllm-openai",
            "allocation_id": str(active_allocation.pk),
            "parameters": {"tensor_parallel": 1},
        },
        format="json",
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict"
    assert "0 of 8 are free" in error["message"]
    assert error["correlation_id"]


def test_a_stopped_instance_says_its_gpus_are_free_and_cannot_start_without_them(
    api, client, allocator, project, active_allocation, vllm
):
    first = fill(allocator, active_allocation, "big-1")
    services.change(principals.for_user(allocator), first, "stop")
    agent_finishes(first, endpoint="api")
    assert first.state == AppInstance.State.STOPPED
    client.force_login(allocator)
    page = client.get(reverse("instance_detail", args=[project.pk, first.pk])).content.decode()
    hostname = active_allocation.node.hostname
    assert f"Stopped, it holds none of {hostname}'s GPUs" in page
    assert "Starting it needs 8 free again" in page

    fill(allocator, active_allocation, "big-2")  # took the GPUs it gave back
    api.force_login(allocator)
    response = api.post(f"/api/v1/projects/{project.pk}/app-instances/{first.pk}/start")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict"
    assert f"needs 8 GPU(s); 0 of 8 are free on {hostname}" in error["message"]
    first.refresh_from_db()
    assert first.state == AppInstance.State.STOPPED
