"""Clustered apps: one member per allocation (node), each with its own task and
state; the instance is running when every member runs and failed when one fails."""

from __future__ import annotations

import json

import pytest

from apps.allocations import services as allocations
from apps.runtime import agents, services
from apps.runtime.models import AgentTask, AppInstance, Operation
from apps.tenancy import principal as principals
from tests.factories import shipped_manifest
from tests.support.catalog import publish

pytestmark = pytest.mark.django_db


def cluster_manifest() -> dict:
    """JupyterLab's manifest as a 2-4 member cluster whose members learn their rank."""
    manifest = shipped_manifest("jupyterlab")
    manifest["cluster"] = {"min_members": 2, "max_members": 4}
    manifest["execution"]["env"] = {
        **manifest["execution"]["env"],
        "RANK": "{{ member.rank }}",
        "WORLD_SIZE": "{{ member.count }}",
        "MASTER_ADDR": "{{ member.primary_host }}",
    }
    return manifest


@pytest.fixture
def cluster_app(db):
    return publish("ddp", cluster_manifest(), name="DDP")


@pytest.fixture
def three_allocations(allocator, project, nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        found = allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04", count=3
        )
    for number, allocation in enumerate(found, start=1):
        allocation.refresh_from_db()
        assert allocation.state == "ACTIVE"
        type(allocation.node).objects.filter(pk=allocation.node_id).update(
            credential_hash="0" * 64, agent_address=f"10.0.0.{number}"
        )
        allocation.node.refresh_from_db()
    return sorted(found, key=lambda a: a.node.hostname)


def launch(api, project, allocations, app="ddp"):
    body = {"app": app, "allocation_ids": [str(a.pk) for a in allocations]}
    return api.post(f"/api/v1/projects/{project.pk}/app-instances", body, format="json")


def launch_pair(api, user, project, allocations):
    """``user`` launches the cluster app on the first two allocations: the instance,
    its primary's allocation and its worker's."""
    api.force_login(user)
    primary, worker = allocations[:2]
    instance = AppInstance.objects.get(pk=launch(api, project, [primary, worker]).json()["instance_id"])
    return instance, primary, worker


def agent_on(allocation, *, succeeded=True, error=""):
    """What the agent on this allocation's node does with its pending task."""
    node = allocation.node
    [task] = agents.claim_tasks(node)
    endpoints = [{"name": "web", "host": node.agent_address, "port": 41000}] if succeeded else []
    agents.report_task(node, task.pk, succeeded=succeeded, error=error, endpoints=endpoints)
    return task


def test_a_cluster_launch_makes_one_member_and_one_task_per_node(
    api, allocator, project, cluster_app, three_allocations
):
    api.force_login(allocator)
    response = launch(api, project, three_allocations[:2])
    assert response.status_code == 202, response.content
    instance = AppInstance.objects.get(pk=response.json()["instance_id"])
    detail = api.get(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}").json()
    primary, worker = three_allocations[:2]
    assert [(m["hostname"], m["rank"], m["role"], m["state"]) for m in detail["members"]] == [
        (primary.node.hostname, 0, "primary", "requested"),
        (worker.node.hostname, 1, "worker", "requested"),
    ]
    tasks = {t.node_id: t for t in AgentTask.objects.filter(instance=instance)}
    assert set(tasks) == {primary.node_id, worker.node_id}
    env = tasks[worker.node_id].spec["container"]["env"]
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("1", "2", primary.node.hostname)
    assert tasks[primary.node_id].spec["container"]["env"]["RANK"] == "0"


def test_the_instance_runs_when_every_member_runs(api, allocator, project, cluster_app, three_allocations):
    instance, primary, worker = launch_pair(api, allocator, project, three_allocations)
    operation = Operation.objects.get(instance=instance)

    agent_on(worker)
    instance.refresh_from_db()
    states = dict(instance.members.values_list("node__hostname", "state"))
    assert instance.state == "starting"
    assert states[worker.node.hostname] == "running"
    operation.refresh_from_db()
    assert (operation.state, operation.progress) == ("running", 65)
    assert not instance.endpoints.get().port  # only the primary's endpoints count

    agent_on(primary)
    instance.refresh_from_db()
    operation.refresh_from_db()
    assert instance.state == "running"
    assert operation.state == "succeeded"
    assert instance.endpoints.get().host == primary.node.agent_address

    # Stop reaches every member; the instance is stopped when the last one is.
    services.change(principals.for_user(allocator), instance, "stop")
    assert AgentTask.objects.filter(instance=instance, action="stop").count() == 2
    agent_on(primary)
    instance.refresh_from_db()
    assert instance.state == "stopping"
    agent_on(worker)
    instance.refresh_from_db()
    assert instance.state == "stopped"


def test_one_failed_member_fails_the_instance_and_says_which(
    api, allocator, project, cluster_app, three_allocations
):
    instance, primary, worker = launch_pair(api, allocator, project, three_allocations)
    agent_on(primary)
    agent_on(worker, succeeded=False, error="NCCL init timed out")
    instance.refresh_from_db()
    assert instance.state == "failed"
    assert instance.state_reason == f"{worker.node.hostname}: NCCL init timed out"
    states = dict(instance.members.values_list("node__hostname", "state"))
    assert states == {primary.node.hostname: "running", worker.node.hostname: "failed"}


def test_a_member_that_stops_running_on_its_node_fails_the_instance(
    api, allocator, project, cluster_app, three_allocations
):
    instance, primary, worker = launch_pair(api, allocator, project, three_allocations)
    agent_on(primary)
    agent_on(worker)
    agents.heartbeat(worker.node, running=[])
    instance.refresh_from_db()
    assert instance.state == "failed"
    assert instance.state_reason.startswith(worker.node.hostname)


@pytest.mark.parametrize(
    ("count", "message"),
    [(1, "This app runs on 2 to 4 allocation(s); 1 given."), (0, "Name the allocation to run on.")],
)
def test_cluster_size_outside_the_manifest_bounds_is_refused(
    api, allocator, project, cluster_app, three_allocations, count, message
):
    api.force_login(allocator)
    response = launch(api, project, three_allocations[:count])
    assert response.status_code == 400
    assert message in json.dumps(response.json()["error"]["details"])
    assert not AppInstance.objects.exists()


def test_single_node_apps_take_one_allocation_and_names_are_not_repeated(
    api, allocator, project, cluster_app, jupyterlab, three_allocations
):
    api.force_login(allocator)
    assert launch(api, project, three_allocations[:2], app="jupyterlab").status_code == 400
    twice = launch(api, project, [three_allocations[0], three_allocations[0]])
    assert twice.status_code == 400
    assert "named twice" in json.dumps(twice.json())


def test_releasing_one_members_allocation_decommissions_the_instance(
    api, allocator, project, cluster_app, three_allocations
):
    instance, _, worker = launch_pair(api, allocator, project, three_allocations)
    assert services.drain_allocation(worker) == 1
    instance.refresh_from_db()
    assert instance.state == "decommissioning"
    assert AgentTask.objects.filter(instance=instance, action="remove").count() == 2


def test_the_launch_form_offers_a_choice_of_nodes_for_a_cluster(
    client, allocator, project, cluster_app, three_allocations
):
    from django.urls import reverse

    client.force_login(allocator)
    url = reverse("app_launch", args=[project.pk, cluster_app.slug])
    page = client.get(url).content.decode()
    assert page.count('type="checkbox" name="allocation"') == 3
    assert "Pick 2 to 4 nodes" in page
    chosen = [str(a.pk) for a in three_allocations[:2]]
    response = client.post(url, {"allocation": chosen, "version": "1.0.0", "param_default_path": "/lab"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    instance = AppInstance.objects.get()
    assert sorted(instance.members.values_list("node__hostname", flat=True)) == sorted(
        a.node.hostname for a in three_allocations[:2]
    )
