"""The production topology of ``make prod-local``, run for real by the command the
target runs (``python -m gpuaas.prodlocal``) with a private port, Redis and the test
database: two web processes behind nginx, a Celery worker and beat, under supervisord.
What crosses processes works, and a worker that dies is replaced and its work resumes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from playwright.sync_api import sync_playwright
from websockets.asyncio.client import connect

from apps.allocations.models import Allocation, Node
from tests.support.agent import running_agent
from tests.support.catalog import publish
from tests.support.processes import wait_for
from tests.support.prodlocal import (
    START_PATIENCE_SECONDS,
    Topology,
    World,
    allocate,
    running_topology,
    state_of,
    tenant_fleet,
)

pytestmark = [pytest.mark.heavy(flushes=True), pytest.mark.production]

# The promise: a dead worker is replaced within this.
REPLACED_WITHIN_SECONDS = 10


@pytest.fixture(scope="module")
def topology(django_db_setup, django_db_blocker, tmp_path_factory):
    with running_topology(tmp_path_factory.mktemp("prod-local"), django_db_blocker) as running:
        yield running


@pytest.fixture(scope="module")
def world(topology, django_db_blocker):
    with tenant_fleet(topology, django_db_blocker) as fleet:
        with django_db_blocker.unblock():
            publish("jupyterlab")
        yield fleet


def test_a_status_update_crosses_processes(topology, world):
    """Allocated through web 1, provisioned by the worker, watched on web 2."""
    port = topology.web_ports[1]
    url = f"ws://127.0.0.1:{port}/ws/projects/{world.project.pk}/allocations/"
    headers = {"Cookie": world.cookie, "Origin": topology.url}

    async def watch() -> list[dict]:
        async with connect(url, additional_headers=headers) as ws:
            await asyncio.sleep(0.2)
            allocation = await asyncio.to_thread(allocate, topology, world)
            seen = []
            while not seen or seen[-1]["state"] != "ACTIVE":
                message = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
                if message.get("allocation_id") == allocation:
                    seen.append(message)
            return seen

    seen = asyncio.run(watch())
    assert seen[-1]["progress"] == 100
    assert {"network", "os_deploy"} <= {message["step"] for message in seen}


def test_jupyterlab_runs_a_notebook_through_nginx_in_chromium(topology, world, django_db_blocker, tmp_path):
    """A real node agent, reaching the portal through nginx, starts JupyterLab; a browser
    signed in on http://localhost opens it on its own origin under *.apps.localhost and
    runs a cell over the kernel's WebSocket."""
    allocation = allocate(topology, world)
    wait_for(lambda: state_of(topology, world, allocation, web=1) == "ACTIVE", timeout=120, what="ACTIVE")
    with contextlib.ExitStack() as stack:
        with django_db_blocker.unblock():
            node = Allocation.objects.select_related("node").get(pk=allocation).node
            stack.enter_context(running_agent(topology.url, node, tmp_path))
            enrolled = Node.objects.filter(pk=node.pk).exclude(credential_hash="")
            wait_for(enrolled.exists, timeout=START_PATIENCE_SECONDS, what="the agent enrolled")
        response = httpx.post(
            f"{topology.web[0]}/api/v1/projects/{world.project.pk}/app-instances",
            json={"app": "jupyterlab", "allocation_id": allocation},
            headers={"Authorization": f"Bearer {world.token}"},
            timeout=30,
        )
        assert response.status_code == 202, response.text
        instance = response.json()["instance_id"]

        def running() -> bool:
            answer = httpx.get(
                f"{topology.web[1]}/api/v1/projects/{world.project.pk}/app-instances/{instance}",
                headers={"Authorization": f"Bearer {world.token}"},
                timeout=10,
            ).json()
            assert answer["state"] not in ("failed", "stopped"), answer
            return answer["state"] == "running"

        wait_for(running, timeout=START_PATIENCE_SECONDS, what="JupyterLab running")

        # Playwright's event loop lives and ends in a thread of its own, never in the
        # test thread that the other tests of this process use.
        with ThreadPoolExecutor(1) as thread:
            url, output = thread.submit(run_a_cell, topology, world, instance).result()
    assert output == "42"
    assert re.match(rf"http://[^./]+\.apps\.localhost:{topology.port}/", url), url


def run_a_cell(topology: Topology, world: World, instance: str) -> tuple[str, str]:
    """``print(6*7)`` in a notebook of the instance, in Chromium: where the app was and
    what the cell printed."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context()
            name, _, value = world.cookie.partition("=")
            context.add_cookies([{"name": name, "value": value, "url": topology.url}])
            page = context.new_page()
            page.goto(f"{topology.url}/projects/{world.project.pk}/instances/{instance}/?tab=app")
            # Under *.localhost every host is a site of its own: the app opens in a tab of its own.
            with context.expect_page() as opened:
                page.click("[data-open-app]")
            app = opened.value
            app.get_by_text("Python 3 (ipykernel)").first.click(timeout=60_000)
            # A cell run before the kernel is connected is dropped: wait until it is idle.
            app.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=60_000)
            app.locator(".jp-Notebook .jp-Cell .cm-content").first.click(timeout=30_000)
            app.keyboard.type("print(6*7)")
            app.keyboard.press("Shift+Enter")
            output = app.locator(".jp-OutputArea-output", has_text="42").first
            output.wait_for(timeout=60_000)
            return app.url, output.inner_text().strip()
        finally:
            browser.close()


def test_a_killed_worker_is_replaced_and_its_allocation_completes(topology, world):
    allocation = allocate(topology, world)
    wait_for(
        lambda: state_of(topology, world, allocation, web=1) not in ("PENDING",),
        timeout=60,
        what="provisioning under way",
    )
    assert state_of(topology, world, allocation, web=1) != "ACTIVE", "too late to kill"

    killed = topology.pid("worker")
    # The worker and its pool processes, as a container's kill ends them all.
    os.killpg(killed, signal.SIGKILL)
    wait_for(
        lambda: topology.pid("worker") not in (0, killed),
        timeout=REPLACED_WITHIN_SECONDS,
        what="a new worker process",
    )
    # The replacement takes work (the ping is the question, not the time it takes).
    wait_for(topology.worker_answers, timeout=START_PATIENCE_SECONDS, what="the new worker answering")

    wait_for(
        lambda: state_of(topology, world, allocation, web=1) == "ACTIVE",
        timeout=120,
        what="the allocation ACTIVE after the crash",
    )
