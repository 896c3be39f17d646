"""A real node agent ships a real app's output: what it prints on stdout and stderr
reaches the instance's logs within seconds, its token never does, a line too long
arrives cut into lines, and an app that prints faster than the platform takes it
costs only its oldest lines, counted; the node keeps no more output than that."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest_framework.test import APIClient

from apps.runtime import selectors
from apps.runtime.models import AppInstance
from node_agent.client import AgentClient
from node_agent.logs import BACKLOG_BYTES, LogShipper
from tests.support.agent import enroll, running_agent
from tests.support.chatty import publish_chatty
from tests.support.instances import PlatformApi
from tests.support.processes import wait_for
from tests.support.proxy import start_instance

pytestmark = pytest.mark.django_db(transaction=True)


def texts(client, instance_id, project) -> list[str]:
    url = f"/api/v1/projects/{project.pk}/app-instances/{instance_id}/logs"
    return [line["text"] for line in client.get(url, {"page_size": 500}).json()["results"]]


def test_a_running_apps_output_reaches_its_logs_live_without_its_token(
    api, portal, allocator, project, active_allocation, tmp_path
):
    publish_chatty()
    api.force_login(allocator)
    platform = PlatformApi(api, project)
    with running_agent(portal.url, active_allocation.node, tmp_path) as agent:
        response = api.post(
            platform.base, {"app": "chatty", "allocation_id": str(active_allocation.pk)}, format="json"
        )
        assert response.status_code == 202, response.content
        instance_id = response.json()["instance_id"]
        platform.wait_state(instance_id, "running", timeout=60)

        lines = wait_for(
            lambda: (seen := texts(api, instance_id, project)) and "tick 3" in seen and seen,
            timeout=30,
            what="tick 3 in the logs",
        )
        token = selectors.runtime_secret(AppInstance.objects.get(pk=instance_id), "token")
        assert token
        assert lines[0] == "starting; my token is ********"
        assert "a warning on stderr" in lines
        # 4,500 characters: two lines of 2,000 and the rest.
        assert [line for line in lines if line.startswith("x")] == ["x" * 2000, "x" * 2000, "x" * 500]
        # Still live: later lines follow.
        wait_for(lambda: "tick 6" in texts(api, instance_id, project), timeout=30, what="tick 6")
        assert all(token not in line for line in texts(api, instance_id, project))
        assert token not in agent.log()


@pytest.fixture
def shipper(api, portal, allocator, project, jupyterlab, active_allocation, tmp_path):
    """A log shipper of the node's agent, in this process, for one instance's output file."""
    instance = start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41234)
    output = tmp_path / str(instance.pk) / "output.log"
    output.parent.mkdir()
    client = AgentClient(portal.url, enroll(api, active_allocation.node, "127.0.0.1"))
    shipper = LogShipper(client, lambda: {str(instance.pk): output})
    shipper.instance, shipper.output = instance, output
    yield shipper
    client.close()


def logs_page(allocator, instance, **query) -> dict:
    reader = APIClient()
    reader.force_login(allocator)
    url = f"/api/v1/projects/{instance.project_id}/app-instances/{instance.pk}/logs"
    return reader.get(url, query).json()


def test_output_faster_than_the_platform_takes_it_costs_the_oldest_lines_counted(shipper, allocator):
    output = shipper.output
    line = b"y" * 99 + b"\n"  # 100 bytes a line
    total = BACKLOG_BYTES // 100 + 5000
    output.write_bytes(line * total)

    shipper.ship()

    first = logs_page(allocator, shipper.instance, page_size=1)
    assert first["results"][0]["dropped"] == 5000  # the newest 4 MB went on
    assert first["count"] == 1 + 500  # the marker, and one batch: a round ships one
    assert Path(output.parent / "output.offset").read_text() != "0"


def test_the_output_file_is_emptied_once_shipped_and_the_app_writes_on(shipper, allocator):
    output = shipper.output
    output.write_bytes((b"z" * 1999 + b"\n") * 600)  # 1.2 MB, over the 1 MB it empties past
    with open(output, "ab") as app:  # as the workload holds it
        for _ in range(10):
            shipper.ship()
        assert output.stat().st_size == 0
        app.write(b"after the emptying\n")
        app.flush()
        shipper.ship()

    lines = logs_page(allocator, shipper.instance, tail=2)["results"]
    assert [line["text"] for line in lines] == ["z" * 1999, "after the emptying"]
    assert logs_page(allocator, shipper.instance, page_size=1)["count"] == 601
