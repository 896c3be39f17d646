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
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from celery import Celery
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import sync_playwright
from websockets.asyncio.client import connect

from apps.allocations.models import Allocation, Node
from apps.networking import services as networking
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from apps.tenancy import services as tenancy
from apps.tenancy.models import Project
from tests.factories import FlavorFactory, ProjectFactory, TenantFactory
from tests.support.agent import running_agent, wait_for
from tests.support.catalog import publish
from tests.support.fleet import make_nodes
from tests.support.members import member
from tests.support.pages import session_cookie
from tests.support.processes import Background, RedisServer
from tests.support.servers import free_port

pytestmark = pytest.mark.production

# Workers and web processes start slowly on a loaded machine.
START_PATIENCE_SECONDS = 180
# The promise: a dead worker is replaced within this.
REPLACED_WITHIN_SECONDS = 10


class Topology:
    def __init__(self, state: Path, port: int, web_ports: list[int], redis: RedisServer, log: Path):
        self.state, self.port, self.web_ports, self.redis = state, port, web_ports, redis
        self.url = f"http://localhost:{port}"
        self.web = [f"http://127.0.0.1:{web}" for web in web_ports]
        self.process = Background(
            [
                sys.executable,
                "-m",
                "gpuaas.prodlocal",
                "--dir",
                str(state),
                "--port",
                str(port),
                "--web-ports",
                ",".join(map(str, web_ports)),
            ],
            self._environment(),
            log,
        )
        self.worker_name = f"worker@{socket.gethostname()}"
        self.celery = Celery(broker=redis.url, backend=redis.url)

    def _environment(self) -> dict[str, str]:
        db = connection.settings_dict
        return {
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "REDIS_URL": self.redis.url,
            "GPUAAS_BROKER_URL": "",  # the broker is this Redis, which the test pings the worker on
            # The test's own keys, so the sessions and secrets the test writes read the same.
            "GPUAAS_SECRET_KEY": settings.SECRET_KEY,
            "GPUAAS_ENCRYPTION_KEYS": ",".join(settings.ENCRYPTION_KEYS),
            "GPUAAS_VAR_DIR": str(self.state / "var"),
            # The test settings' values (in this process's environment) give way to production's.
            "GPUAAS_CELERY_EAGER": "false",
            "GPUAAS_PATH_ROUTES": "",
            "GPUAAS_DB_POOL_TIMEOUT": "",
            "GPUAAS_SIMULATED_STEP_SECONDS": "2",
            # A dead worker's allocation is resumed within lease + reconcile interval.
            "GPUAAS_PIPELINE_LEASE_SECONDS": "6",
            "GPUAAS_PIPELINE_RECONCILE_SECONDS": "2",
        }

    def wait_ready(self) -> None:
        def ready() -> bool:
            self.process.check_alive("prod-local")
            try:
                answers = [
                    httpx.get(f"{base}/readyz", timeout=2).status_code for base in (self.url, *self.web)
                ]
            except httpx.HTTPError:
                return False
            return answers == [200, 200, 200] and self.worker_answers()

        wait_for(
            ready, timeout=START_PATIENCE_SECONDS, what=f"prod-local ready (see {self.process.log_path})"
        )

    def worker_answers(self) -> bool:
        return bool(self.celery.control.ping(destination=[self.worker_name], timeout=1.0))

    def pid(self, program: str) -> int:
        """The program's process id while supervisord has it running, else 0."""
        supervisorctl = Path(sys.executable).parent / "supervisorctl"
        result = subprocess.run(
            [str(supervisorctl), "-c", str(self.state / "supervisord.conf"), "pid", program],
            capture_output=True,
            text=True,
        )
        return int(result.stdout.strip()) if result.stdout.strip().isdigit() else 0

    def stop(self) -> None:
        self.celery.close()
        self.process.stop(timeout=90)


@pytest.fixture(scope="module")
def topology(django_db_setup, django_db_blocker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prod-local")
    redis = RedisServer(free_port(), tmp / "redis.log", str(tmp))
    redis.wait_ready()
    with django_db_blocker.unblock():
        running = Topology(
            tmp / "state", free_port(), [free_port(), free_port()], redis, tmp / "prod-local.log"
        )
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()
        redis.stop()


@dataclass
class World:
    project: Project
    token: str  # a service account's platform token, issued by web 1
    cookie: str  # a signed-in browser's: sessionid=...


@pytest.fixture(scope="module")
def world(topology, django_db_blocker):
    """One tenant's fleet for the module's tests. Kept from test to test: a transactional
    test's flush would take the platform's signing key from under the web processes,
    which keep it a minute. Flushed at the end, as a transactional test leaves the database."""
    with django_db_blocker.unblock():
        tenant = TenantFactory(tenant_id="acme", name="Acme")
        project = ProjectFactory(tenant=tenant, project_id="cell-1", name="Cell 1")
        networking.load_pool(prefix="vrf", count=4, first_vni=50001, first_vlan=1000)
        networking.assign_tenant_network(tenant)
        storage.provision_tenant_storage(tenant)
        quotas.set_quota(tenant, {"gpus": 64, "nodes": 8, "storage_gb": 1_000_000})
        make_nodes(FlavorFactory(name="h100-8x"), 4)
        admin = principals.for_user(member("tenant_admin", tenant=tenant))
        issued = tenancy.create_service_account(admin, project, name="smoke", role="project_admin")
        cookie = session_cookie(member("project_admin", project=project))
        publish("jupyterlab")
    try:
        response = httpx.post(
            f"{topology.web[0]}/api/v1/auth/token",
            data={
                "grant_type": "client_credentials",
                "client_id": issued.account.client_id,
                "client_secret": issued.client_secret,
            },
        )
        assert response.status_code == 200, response.text
        yield World(project, response.json()["access_token"], cookie)
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


def allocate(topology: Topology, world: World) -> str:
    response = httpx.post(
        f"{topology.web[0]}/api/v1/projects/{world.project.pk}/allocations",
        json={"flavor": "h100-8x", "os_image": "ubuntu-22.04"},
        headers={"Authorization": f"Bearer {world.token}"},
        timeout=10,
    )
    assert response.status_code == 202, response.text
    return response.json()["allocation_id"]


def state_of(topology: Topology, world: World, allocation_id: str, web: int) -> str:
    response = httpx.get(
        f"{topology.web[web]}/api/v1/projects/{world.project.pk}/allocations/{allocation_id}",
        headers={"Authorization": f"Bearer {world.token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()["state"]


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
