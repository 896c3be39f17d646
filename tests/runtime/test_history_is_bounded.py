"""An instance's history, and a project's deleted instances, keep their newest rows: a
project whose node's agent (the node's root user controls it) answers at once can stop
and start an app in a loop, or launch and decommission apps in one, without growing
the tables for ever.

The agent's part is played by the test (``claim_tasks``, ``report_task``)."""

from __future__ import annotations

import pytest
from guardian.models import UserObjectPermission

from apps.runtime import agents, history, services
from apps.runtime.models import AgentTask, AppInstance, InstanceEvent, Operation
from apps.tenancy.principal import for_user
from tests.support.members import member
from tests.support.proxy import start_instance
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


@pytest.fixture
def running(allocator, project, jupyterlab, active_allocation):
    return start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41000)


def agent_does_its_tasks(instance) -> None:
    node = instance.allocation.node
    for task in agents.claim_tasks(node):
        agents.report_task(
            node, task.pk, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": 41000}]
        )
    instance.refresh_from_db()


def stop_and_start(user, instance, times: int) -> None:
    for _ in range(times):
        for action in ("stop", "start"):
            services.change(for_user(user), instance, action)
            agent_does_its_tasks(instance)


def test_an_instance_keeps_its_newest_events(api, allocator, project, running, monkeypatch):
    monkeypatch.setattr(history, "EVENTS_KEPT", 5)
    stop_and_start(allocator, running, 3)
    assert running.state == "running"

    api.force_login(allocator)
    url = f"/api/v1/projects/{project.pk}/app-instances/{running.pk}/events"
    events = api.get(url).json()["results"]
    assert [(e["from_state"], e["to_state"]) for e in events] == [
        ("starting", "running"),
        ("stopped", "starting"),
        ("stopping", "stopped"),
        ("running", "stopping"),
        ("starting", "running"),
    ]
    assert InstanceEvent.objects.filter(instance=running).count() == 5


def test_an_instance_keeps_its_newest_operations_and_finished_tasks(api, allocator, running, monkeypatch):
    monkeypatch.setattr(history, "OPERATIONS_KEPT", 2)
    monkeypatch.setattr(history, "FINISHED_TASKS_KEPT", 2)
    launch = Operation.objects.get(instance=running)
    stop_and_start(allocator, running, 2)
    stop = services.change(for_user(allocator), running, "stop")  # its task still waits for the agent

    api.force_login(allocator)
    assert api.get(f"/api/v1/operations/{launch.pk}").status_code == 404
    assert api.get(f"/api/v1/operations/{stop.pk}").json()["state"] in ("pending", "running")
    assert Operation.objects.filter(instance=running).count() == 2
    tasks = AgentTask.objects.filter(instance=running)
    assert sorted(tasks.values_list("status", flat=True)) == ["pending", "succeeded", "succeeded"]
    # The waiting task was kept: the agent still gets it.
    [claimed] = agents.claim_tasks(running.allocation.node)
    assert claimed.operation_id == stop.pk


def test_a_project_keeps_its_newest_deleted_instances(
    api, allocator, project, jupyterlab, active_allocation, monkeypatch
):
    monkeypatch.setattr(history, "DELETED_KEPT", 1)
    colleague = member("viewer", project=project)
    deleted = []
    for port in (41000, 41001):
        instance = start_instance(
            allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=port
        )
        services.share(for_user(allocator), instance, usernames=[colleague.username])
        services.change(for_user(allocator), instance, "decommission")
        agent_does_its_tasks(instance)
        assert instance.state == "deleted"
        deleted.append(instance)
    first, second = deleted

    api.force_login(allocator)
    listed = api.get(f"/api/v1/projects/{project.pk}/app-instances", {"state": "deleted"}).json()["results"]
    assert [item["id"] for item in listed] == [str(second.pk)]
    assert not AppInstance.objects.filter(pk=first.pk).exists()
    assert not Operation.objects.filter(instance_id=first.pk).exists()
    # Its shares went with it (django-guardian's rows have no foreign key to cascade).
    shared = UserObjectPermission.objects.filter(user=colleague)
    assert list(shared.values_list("object_pk", flat=True)) == [str(second.pk)]
