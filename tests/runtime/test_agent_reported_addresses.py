"""Where the platform proxy connects is the node's own address, never what its agent
says: a tenant with root on a node controls the agent and its reports, and the proxy
sits inside the platform's network. Through the agent API, as a node's agent calls it."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.proxy.models import ProxyRoute
from apps.runtime.models import AgentTask, AppInstance, Operation
from tests.support.agent import enroll
from tests.support.instances import ask_launch
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())

NODE_ADDRESS = "10.20.0.7"


def launch_and_claim(api, allocator, project, allocation, credential) -> tuple[AppInstance, str]:
    """A user launches JupyterLab; the node's agent fetches the start task."""
    api.force_login(allocator)
    response = ask_launch(api, project, allocation)
    assert response.status_code == 202, response.content
    api.logout()
    [task] = api.get("/api/agent/v1/tasks", HTTP_AUTHORIZATION=f"Node {credential}").json()["tasks"]
    return AppInstance.objects.get(pk=response.json()["instance_id"]), task["id"]


def report_started(api, credential, task_id, host: str, port: int = 41234):
    return api.post(
        f"/api/agent/v1/tasks/{task_id}/report",
        {"status": "succeeded", "endpoints": [{"name": "web", "host": host, "port": port}]},
        format="json",
        HTTP_AUTHORIZATION=f"Node {credential}",
    )


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",  # the platform's own services, from the proxy's point of view
        "::1",
        "0.0.0.0",
        "169.254.169.254",  # cloud metadata
        "10.20.0.8",  # a neighbour on the node's network
        "redis",  # a name, resolved only when the proxy connects
    ],
)
def test_a_report_naming_another_host_fails_the_launch_and_no_route_appears(
    api, allocator, project, jupyterlab, active_allocation, host
):
    node = active_allocation.node
    credential = enroll(api, node, NODE_ADDRESS)
    instance, task_id = launch_and_claim(api, allocator, project, active_allocation, credential)

    response = report_started(api, credential, task_id, host)

    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "forbidden"
    assert f"web at {host}" in error["message"]
    assert NODE_ADDRESS in error["message"]
    assert error["details"] == {"endpoints": [{"name": "web", "host": host, "port": 41234}]}
    instance.refresh_from_db()
    assert instance.state == "failed"
    assert f"web at {host}" in instance.state_reason
    assert instance.events.filter(kind="endpoint_refused", to_state="failed").exists()
    endpoint = instance.endpoints.get()
    assert (endpoint.host, endpoint.port) == ("", None)
    route = ProxyRoute.objects.get(instance=instance)
    assert route.status != "active"
    assert (route.upstream_host, route.upstream_port) == ("", None)
    assert AgentTask.objects.get(pk=task_id).status == "failed"
    assert Operation.objects.get(instance=instance, kind="launch").state == "failed"
    [event] = AuditEvent.objects.filter(action="agent.endpoint_refused")
    assert (event.actor, event.outcome, event.target_id) == (
        f"node:{node.hostname}",
        "denied",
        str(instance.pk),
    )
    assert (event.tenant_id, event.project_id) == (instance.tenant_id, instance.project_id)
    # The agent reporting again changes nothing: the task is done.
    assert report_started(api, credential, task_id, NODE_ADDRESS).status_code == 204
    instance.refresh_from_db()
    assert instance.state == "failed"


def test_a_report_naming_endpoints_without_end_is_refused_whole(
    api, allocator, project, jupyterlab, active_allocation
):
    """Each refused endpoint went into the task's refusal, its audit record and its answer:
    an agent (root on the node, so the tenant) could write megabytes with every start."""
    credential = enroll(api, active_allocation.node, NODE_ADDRESS)
    instance, task_id = launch_and_claim(api, allocator, project, active_allocation, credential)
    flood = [{"name": f"web{n}", "host": "10.20.0.8", "port": 41234} for n in range(20_000)]

    response = api.post(
        f"/api/agent/v1/tasks/{task_id}/report",
        {"status": "succeeded", "endpoints": flood},
        format="json",
        HTTP_AUTHORIZATION=f"Node {credential}",
    )

    assert response.status_code == 400, response.status_code
    assert response.json()["error"]["code"] == "validation_error"
    assert "endpoints" in response.json()["error"]["details"]
    assert not AuditEvent.objects.filter(action="agent.endpoint_refused").exists()
    assert AgentTask.objects.get(pk=task_id).status == "claimed"  # its real report still counts
    assert report_started(api, credential, task_id, NODE_ADDRESS).status_code == 204
    instance.refresh_from_db()
    assert instance.state == "running"


@pytest.mark.parametrize(
    ("enrolled_from", "reported"),
    [
        (NODE_ADDRESS, NODE_ADDRESS),
        (f"::ffff:{NODE_ADDRESS}", NODE_ADDRESS),  # a dual-stack listener's view of an IPv4 peer
        ("127.0.0.1", "127.0.0.1"),  # an agent on the platform's own machine (the embedded default)
        ("127.0.0.1", "::1"),
    ],
)
def test_the_nodes_own_address_is_accepted(
    api, allocator, project, jupyterlab, active_allocation, enrolled_from, reported
):
    credential = enroll(api, active_allocation.node, enrolled_from)
    instance, task_id = launch_and_claim(api, allocator, project, active_allocation, credential)

    assert report_started(api, credential, task_id, reported).status_code == 204

    instance.refresh_from_db()
    assert instance.state == "running"
    route = ProxyRoute.objects.get(instance=instance)
    assert (route.status, route.upstream_host, route.upstream_port) == ("active", reported, 41234)


def test_an_agent_enrolled_before_addresses_were_recorded_is_told_to_enroll_again(
    api, allocator, project, jupyterlab, active_allocation
):
    node = active_allocation.node
    credential = enroll(api, node, NODE_ADDRESS)
    type(node).objects.filter(pk=node.pk).update(agent_address=None)
    instance, task_id = launch_and_claim(api, allocator, project, active_allocation, credential)

    response = report_started(api, credential, task_id, NODE_ADDRESS)

    assert response.status_code == 403
    assert "none recorded: enroll its agent again" in response.json()["error"]["message"]
    instance.refresh_from_db()
    assert instance.state == "failed"
    assert "enroll its agent again" in instance.state_reason
