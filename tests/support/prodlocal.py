"""The production topology of ``make prod-local``, run for real by the command the
target runs (``python -m gpuaas.prodlocal``) with a private port, Redis and the test
database: two web processes behind nginx, a Celery worker and beat, under supervisord.
Shared by the test modules that run it (one topology per module: it takes a minute
to start on a loaded machine)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from celery import Celery
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from apps.allocations.models import Allocation
from apps.networking import services as networking
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from apps.tenancy import services as tenancy
from apps.tenancy.models import Project
from gpuaas import prodlocal
from tests.factories import FlavorFactory, ProjectFactory, TenantFactory
from tests.support.fleet import make_nodes
from tests.support.members import member
from tests.support.pages import session_cookie
from tests.support.processes import Background, RedisServer, free_port, wait_for

# An answer slower than this is a hang (the goal, 2 s, is benchmarks/outages.py's to measure).
PATIENCE_SECONDS = 5
# Workers and web processes start slowly on a loaded machine.
START_PATIENCE_SECONDS = 180
# The whole topology, its database migrated first: minutes on a machine shared with
# other test runs and benchmarks.
TOPOLOGY_START_SECONDS = 600


class Topology:
    """prod-local on ``port`` (nginx) and ``web_ports``, its Redis (cache, and broker
    unless ``broker_url`` names another) ``redis``; its database the test database,
    reached on ``database_port`` when given (a path a test can cut) or directly."""

    def __init__(
        self,
        state: Path,
        port: int,
        web_ports: list[int],
        redis: RedisServer,
        log: Path,
        database_port: int | None = None,
        broker_url: str = "",
    ):
        self.state, self.port, self.web_ports, self.redis = state, port, web_ports, redis
        self.database_port, self.broker_url = database_port, broker_url
        self.url = f"http://localhost:{port}"
        self.web = [f"http://127.0.0.1:{web}" for web in web_ports]
        self.process = Background(
            prodlocal.command(state, port, web_ports),
            self._environment(),
            log,
        )
        self.worker_name = f"worker@{socket.gethostname()}"
        self.celery = Celery(broker=broker_url or redis.url, backend=redis.url, set_as_current=False)

    def _environment(self) -> dict[str, str]:
        db = connection.settings_dict
        port = self.database_port or db["PORT"]
        return {
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{port}/{db['NAME']}",
            "REDIS_URL": self.redis.url,
            "GPUAAS_BROKER_URL": self.broker_url,  # empty: this Redis
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
            ready, timeout=TOPOLOGY_START_SECONDS, what=f"prod-local ready (see {self.process.log_path})"
        )

    def worker_answers(self) -> bool:
        try:
            return bool(self.celery.control.ping(destination=[self.worker_name], timeout=1.0))
        except Exception:  # noqa: BLE001 - its broker may be the dependency a test took down
            return False

    def pid(self, program: str) -> int:
        """The program's process id while supervisord has it running, else 0."""
        supervisorctl = Path(sys.executable).parent / "supervisorctl"
        result = subprocess.run(
            [str(supervisorctl), "-c", str(self.state / "supervisord.conf"), "pid", program],
            capture_output=True,
            text=True,
        )
        return int(result.stdout.strip()) if result.stdout.strip().isdigit() else 0

    def recent_logs(self, lines: int = 15) -> str:
        """The end of nginx's and supervisord's logs: what a failed request's reason is
        in (nginx names the upstream that refused; supervisord, a process that exited)."""
        tails = []
        for name in ("nginx", "supervisord"):
            path = self.state / "logs" / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            # nginx's error lines only (its access lines, JSON, share the file).
            kept = [line for line in text.splitlines() if not line.startswith("{")]
            tails.append(f"--- {path}\n" + "\n".join(kept[-lines:]))
        return "\n".join(tails)

    def stop(self) -> None:
        self.celery.close()
        self.process.stop(timeout=90)


@contextlib.contextmanager
def running_topology(
    tmp: Path, django_db_blocker, database_port: int | None = None, broker_url: str = ""
) -> Iterator[Topology]:
    """prod-local with a private Redis under ``tmp``, ready (its worker answering)."""
    redis = RedisServer(free_port(), tmp / "redis.log", str(tmp))
    redis.wait_ready()
    with django_db_blocker.unblock():
        running = Topology(
            tmp / "state",
            free_port(),
            [free_port(), free_port()],
            redis,
            tmp / "prod-local.log",
            database_port=database_port,
            broker_url=broker_url,
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

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@contextlib.contextmanager
def tenant_fleet(topology: Topology, django_db_blocker, nodes: int = 4) -> Iterator[World]:
    """One tenant's fleet of ``nodes`` for a module's tests. Kept from test to test: a
    transactional test's flush would take the platform's signing key from under the web
    processes, which keep it a minute. Flushed at the end, as a transactional test
    leaves the database."""
    with django_db_blocker.unblock():
        tenant = TenantFactory(tenant_id="acme", name="Acme")
        project = ProjectFactory(tenant=tenant, project_id="cell-1", name="Cell 1")
        networking.load_pool(prefix="vrf", count=4, first_vni=50001, first_vlan=1000)
        networking.assign_tenant_network(tenant)
        storage.provision_tenant_storage(tenant)
        quotas.set_quota(tenant, {"gpus": 8 * nodes, "nodes": nodes, "storage_gb": 1_000_000})
        make_nodes(FlavorFactory(name="h100-8x"), nodes)
        admin = principals.for_user(member("tenant_admin", tenant=tenant))
        issued = tenancy.create_service_account(admin, project, name="smoke", role="project_admin")
        cookie = session_cookie(member("project_admin", project=project))
    try:
        response = httpx.post(
            f"{topology.web[0]}/api/v1/auth/token",
            data={
                "grant_type": "client_credentials",
                "client_id": issued.account.client_id,
                "client_secret": issued.client_secret,
            },
            timeout=30,
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
        headers=world.bearer,
        timeout=10,
    )
    assert response.status_code == 202, response.text
    return response.json()["allocation_id"]


def state_of(topology: Topology, world: World, allocation_id: str, web: int) -> str:
    response = httpx.get(
        f"{topology.web[web]}/api/v1/projects/{world.project.pk}/allocations/{allocation_id}",
        headers=world.bearer,
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()["state"]


def states_of(allocations) -> set[str]:
    return set(Allocation.objects.filter(pk__in=allocations).values_list("state", flat=True))


def in_flight(topology: Topology, world: World, count: int) -> list[str]:
    """``count`` allocations accepted and provisioning, none finished yet."""
    allocations = [allocate(topology, world) for _ in range(count)]
    wait_for(
        lambda: states_of(allocations) == {"PROVISIONING"},
        timeout=START_PATIENCE_SECONDS,
        what="provisioning",
    )
    return allocations


def assert_answered(response: httpx.Response, dependency: str) -> None:
    """Answered while ``dependency`` is down: a success (what does without it), or 503
    with ``Retry-After``, in the envelope naming the dependency on the API; never a 500."""
    what = f"{response.request.method} {response.request.url}: {response.status_code} {response.text[:300]}"
    assert response.status_code == 503 or response.status_code < 400, what
    if response.status_code != 503:
        return
    assert int(response.headers["Retry-After"]) > 0, what
    if "/api/" in response.request.url.path:
        error = response.json()["error"]
        assert error["code"] == "unavailable", what
        assert error["details"] == {"dependency": dependency}, what


def first_requests_succeed(topology: Topology, world: World) -> None:
    """The API and a page on each web process, once the dependency is back."""
    for base in topology.web:
        projects = httpx.get(f"{base}/api/v1/projects", headers=world.bearer, timeout=PATIENCE_SECONDS)
        assert projects.status_code == 200, projects.text
        page = httpx.get(f"{base}/", headers={"Cookie": world.cookie}, timeout=PATIENCE_SECONDS)
        assert page.status_code == 200, page.text[:300]
