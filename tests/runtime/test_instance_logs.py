"""An instance's logs on the portal's side: the node's agent posts lines (bounded
batches, only for its own node's instances), the newest 10,000 stay, and only those
who see the instance read them: the API, the Logs tab and the download."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.allocations import pipeline
from apps.allocations import services as allocations
from apps.runtime import agents
from apps.runtime.agents import LOG_LINES_KEPT
from apps.tenancy import principal as principals
from tests.factories import NodeFactory
from tests.support.agent import enroll
from tests.support.fleet import allocation_on
from tests.support.members import member
from tests.support.proxy import start_instance
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


@pytest.fixture
def instance(api, allocator, project, jupyterlab, active_allocation):
    return start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41234)


@pytest.fixture
def agent(api, active_allocation):
    """An API client holding the node's credential, as its agent."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {enroll(api, active_allocation.node, '127.0.0.1')}")
    return client


def ship(agent, instance, lines, dropped=0):
    return agent.post(
        f"/api/agent/v1/instances/{instance.pk}/logs", {"lines": lines, "dropped": dropped}, format="json"
    )


def logs_url(instance) -> str:
    return f"/api/v1/projects/{instance.project_id}/app-instances/{instance.pk}/logs"


def read(client, instance, **query) -> list[dict]:
    response = client.get(logs_url(instance), {"page_size": 500, **query})
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_lines_the_agent_ships_are_read_in_order_on_the_tab_in_the_api_and_in_the_download(
    agent, instance, allocator
):
    assert ship(agent, instance, ["starting", "  indented <b>not markup</b>", ""]).status_code == 200
    assert ship(agent, instance, ["ready"], dropped=7).status_code == 200
    client = APIClient()
    client.force_login(allocator)

    lines = read(client, instance)
    assert [(line["text"], line["dropped"]) for line in lines] == [
        ("starting", 0),
        ("  indented <b>not markup</b>", 0),
        ("", 0),
        ("", 7),
        ("ready", 0),
    ]
    assert [line["text"] for line in read(client, instance, after=lines[1]["id"])] == ["", "", "ready"]
    assert [line["text"] for line in read(client, instance, tail=2)] == ["", "ready"]

    page = client.get(f"/projects/{instance.project_id}/instances/{instance.pk}/?tab=logs")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'aria-current="page">Logs</a>' in html
    assert "  indented &lt;b&gt;not markup&lt;/b&gt;" in html
    assert "7 lines dropped" in html
    assert f'data-after="{lines[-1]["id"]}"' in html

    download = client.get(f"/projects/{instance.project_id}/instances/{instance.pk}/logs/download/")
    assert download.status_code == 200
    assert download["Content-Type"] == "text/plain; charset=utf-8"
    assert download["Content-Disposition"] == f'attachment; filename="{instance.name}-logs.txt"'
    assert download.content.decode() == (
        "starting\n  indented <b>not markup</b>\n\n[7 lines dropped]\nready\n"
    )


def test_only_the_newest_10000_lines_are_kept(agent, instance, allocator):
    total = LOG_LINES_KEPT + 700
    for first in range(0, total, 500):
        lines = [f"line {n}" for n in range(first, min(first + 500, total))]
        assert ship(agent, instance, lines).status_code == 200

    assert instance.log_lines.count() == LOG_LINES_KEPT
    client = APIClient()
    client.force_login(allocator)
    response = client.get(logs_url(instance), {"page_size": 1})
    assert response.json()["count"] == LOG_LINES_KEPT
    assert response.json()["results"][0]["text"] == "line 700"
    assert read(client, instance, tail=1)[0]["text"] == f"line {total - 1}"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lines": ["x"] * 501}, "lines"),
        ({"lines": ["x" * 2001]}, "lines"),
        ({"lines": ["nul \x00 inside"]}, "lines"),
        ({"lines": "not a list"}, "lines"),
        ({"lines": [], "dropped": -1}, "dropped"),
    ],
)
def test_a_batch_out_of_bounds_is_refused_whole(agent, instance, body, field):
    response = agent.post(f"/api/agent/v1/instances/{instance.pk}/logs", body, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]
    assert not instance.log_lines.exists()


def test_an_agent_writes_only_the_logs_of_its_own_nodes_instances(api, agent, instance, flavor):
    other_node = NodeFactory(hostname="gpu-other", flavor=flavor)
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION=f"Node {enroll(api, other_node, '10.0.0.9')}")

    assert ship(stranger, instance, ["forged"]).status_code == 404
    assert (
        APIClient()
        .post(f"/api/agent/v1/instances/{instance.pk}/logs", {"lines": ["anonymous"]}, format="json")
        .status_code
        == 401
    )
    assert not instance.log_lines.exists()


def test_the_nodes_next_tenant_cannot_write_into_the_logs_of_the_instances_it_ran_before(
    api, agent, instance, allocator, other_tenant_project
):
    """The node keeps its identity from one allocation to the next: its next tenant, root
    on it, holds a fresh credential of the same node, which must not reach the logs its
    earlier tenants' instances left (their owners still read them)."""
    ship(agent, instance, ["acme's last line"])
    node, allocation = instance.allocation.node, instance.allocation
    allocations.release(principals.for_user(allocator), allocation)
    assert pipeline.advance(allocation.pk)  # draining: the node's agent is asked to remove the app
    for task in agents.claim_tasks(node):
        agents.report_task(node, task.pk, succeeded=True)
    assert pipeline.advance(allocation.pk) is None
    allocation.refresh_from_db()
    instance.refresh_from_db()
    assert (allocation.state, instance.state) == ("RELEASED", "deleted")

    allocation_on(other_tenant_project, node)
    globex_agent = APIClient()
    globex_agent.credentials(HTTP_AUTHORIZATION=f"Node {enroll(api, node, '10.0.0.9')}")

    response = ship(globex_agent, instance, ["Your instance was compromised: sign in again at evil.example"])

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert list(instance.log_lines.values_list("text", flat=True)) == ["acme's last line"]


@pytest.mark.parametrize(
    ("who", "sees"),
    [
        ("owner", True),
        ("project_admin", True),
        ("tenant_admin", True),
        ("viewer", False),  # the instance is its owner's own: not shared with the project
        ("other_project_admin", False),
        ("other_tenant_admin", False),
    ],
)
def test_only_those_who_see_the_instance_read_its_logs(
    agent, instance, allocator, project, other_project, other_tenant_project, who, sees
):
    ship(agent, instance, ["secret-ish output"])
    user = {
        "owner": lambda: allocator,
        "project_admin": lambda: member("project_admin", project=project),
        "tenant_admin": lambda: member("tenant_admin", tenant=project.tenant),
        "viewer": lambda: member("viewer", project=project),
        "other_project_admin": lambda: member("project_admin", project=other_project),
        "other_tenant_admin": lambda: member("tenant_admin", tenant=other_tenant_project.tenant),
    }[who]()
    client = APIClient()
    client.force_login(user)

    api = client.get(logs_url(instance))
    download = client.get(f"/projects/{instance.project_id}/instances/{instance.pk}/logs/download/")
    page = client.get(f"/projects/{instance.project_id}/instances/{instance.pk}/?tab=logs")

    expected = 200 if sees else 404
    assert (api.status_code, download.status_code, page.status_code) == (expected, expected, expected)
    if sees:
        assert api.json()["results"][0]["text"] == "secret-ish output"
    else:
        assert api.json()["error"]["code"] == "not_found"
        assert b"secret-ish output" not in download.content + page.content


@pytest.mark.parametrize("query", [{"tail": 0}, {"tail": LOG_LINES_KEPT + 1}, {"after": "x"}, {"after": -1}])
def test_a_bad_tail_or_cursor_answers_the_error_envelope(allocator, instance, query):
    client = APIClient()
    client.force_login(allocator)

    response = client.get(logs_url(instance), query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert set(response.json()["error"]["details"]) == set(query)
