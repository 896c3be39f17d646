"""Faults on the production topology itself (``make prod-local``: two web processes
behind nginx, a Celery worker and beat, under supervisord), with allocations and an
app launch in flight when they strike:

- Redis (cache, channel layer and broker) killed and started again empty;
- PostgreSQL crashed (every connection reset, new ones refused) and restored;
- the node agent running the app killed and started again.

While a dependency is down every API and page request answers, soon, and never 500:
503 ``unavailable`` with ``Retry-After`` (the envelope on the API) where it needs the
dependency, and ``/readyz`` names it. Once it is back the first request succeeds, and
every allocation and app launch that was in flight completes within a minute: none
lost (the broker's messages went with Redis; the reconciler finds the work) and no
node given twice. How soon the answers come is measured by benchmarks/outages.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import httpx
import pytest
from django.db import connection
from django.db.models import Count
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from apps.allocations.models import Allocation, Node
from apps.runtime.models import AgentTask, AppInstance, InstanceEvent
from tests.factories import shipped_manifest
from tests.support.agent import AgentProcess, running_agent
from tests.support.catalog import publish
from tests.support.processes import CuttablePath, wait_for
from tests.support.prodlocal import (
    PATIENCE_SECONDS,
    START_PATIENCE_SECONDS,
    Topology,
    World,
    allocate,
    assert_answered,
    first_requests_succeed,
    in_flight,
    running_topology,
    states_of,
    tenant_fleet,
)

pytestmark = [pytest.mark.heavy(flushes=True), pytest.mark.production]

# The promise: work in flight completes within this of the dependency's return.
COMPLETES_WITHIN_SECONDS = 60
# Long enough for the work in flight to meet the outage (the pipeline polls every 2 s).
DOWN_FOR_SECONDS = 8

# An app that takes a few seconds to answer, so a test can strike while its start runs.
SLOW_START = """
import http.server as h,sys,time
time.sleep(6)
class H(h.BaseHTTPRequestHandler):
 def do_GET(s):s.send_response(200);s.end_headers()
 def log_message(*a):0
h.HTTPServer((sys.argv[1],int(sys.argv[2])),H).serve_forever()
"""


@pytest.fixture(scope="module")
def database_path():
    db = connection.settings_dict
    path = CuttablePath((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    yield path
    path.cut()


@pytest.fixture(scope="module")
def topology(django_db_setup, django_db_blocker, tmp_path_factory, database_path):
    with running_topology(
        tmp_path_factory.mktemp("prod-local"), django_db_blocker, database_port=database_path.port
    ) as running:
        yield running


@pytest.fixture(scope="module")
def world(topology, django_db_blocker):
    with tenant_fleet(topology, django_db_blocker, nodes=12) as fleet:
        manifest = shipped_manifest("jupyterlab")
        manifest["process"] = {
            "command": ["python", "-c", SLOW_START, "{{ node.address }}", "{{ port.web }}"],
            "ready_path": "/",
        }
        with django_db_blocker.unblock():
            publish("slow-start", manifest, name="Slow start")
        yield fleet


@dataclass
class Placement:
    allocation: str
    node: Node
    agent: AgentProcess


@pytest.fixture(scope="module")
def placement(topology, world, django_db_blocker, tmp_path_factory):
    """An ACTIVE allocation whose node runs a real agent, reaching the portal through nginx."""
    allocation = allocate(topology, world)
    with django_db_blocker.unblock():
        wait_for(lambda: states_of([allocation]) == {"ACTIVE"}, timeout=START_PATIENCE_SECONDS, what="ACTIVE")
        node = Allocation.objects.select_related("node").get(pk=allocation).node
        with running_agent(topology.url, node, tmp_path_factory.mktemp("agent")) as agent:
            enrolled = Node.objects.filter(pk=node.pk).exclude(credential_hash="")
            wait_for(enrolled.exists, timeout=START_PATIENCE_SECONDS, what="the agent enrolled")
            yield Placement(allocation, node, agent)


@pytest.fixture
def db_access(django_db_blocker):
    """The test reads the database directly (never through the path a test cuts)."""
    with django_db_blocker.unblock():
        yield


def _launch(topology: Topology, world: World, placement: Placement) -> str:
    response = httpx.post(
        f"{topology.web[0]}/api/v1/projects/{world.project.pk}/app-instances",
        json={"app": "slow-start", "allocation_id": placement.allocation},
        headers=world.bearer,
        timeout=30,
    )
    assert response.status_code == 202, response.text
    return response.json()["instance_id"]


def _claimed(instance: str) -> bool:
    return AgentTask.objects.filter(instance_id=instance, status=AgentTask.Status.CLAIMED).exists()


def _answers_while_down(topology: Topology, world: World, dependency: str) -> list[str]:
    """Every API and page request, through nginx and to each web process: answered,
    never 500, 503 with ``Retry-After`` (and the envelope naming the dependency on the
    API) where it needs what is down. Returns the allocations accepted meanwhile (their
    record saved, their wake-up left to the reconciler). A failure carries the end of
    nginx's and supervisord's logs."""
    try:
        return _asked_while_down(topology, world, dependency)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{topology.recent_logs()}") from None


def _asked_while_down(topology: Topology, world: World, dependency: str) -> list[str]:
    project = world.project.pk
    page = {"Cookie": world.cookie}
    requests = [
        ("GET", "/api/v1/projects", world.bearer),
        ("GET", f"/api/v1/projects/{project}/allocations", world.bearer),
        ("GET", f"/api/v1/projects/{project}/app-instances", world.bearer),
        ("GET", "/", page),
        ("GET", f"/projects/{project}/allocations/", page),
        ("GET", "/accounts/login/", {}),
    ]
    accepted = []
    for base in (topology.url, *topology.web):
        ready = httpx.get(f"{base}/readyz", timeout=PATIENCE_SECONDS)
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"][dependency] == "unavailable"
        for method, path, headers in requests:
            response = httpx.request(method, base + path, headers=headers, timeout=PATIENCE_SECONDS)
            assert_answered(response, dependency)
        # Only the API is asked whether the dependency is named: pages may do without it.
        projects = httpx.get(f"{base}/api/v1/projects", headers=world.bearer, timeout=PATIENCE_SECONDS)
        assert projects.status_code == 503, projects.text
    # A status stream (a WebSocket) is refused as plainly, not with the server's 500.
    stream = f"ws://127.0.0.1:{topology.web_ports[0]}/ws/projects/{project}/allocations/"
    with pytest.raises(InvalidStatus) as refused:
        connect(stream, additional_headers={**page, "Origin": topology.url}, open_timeout=PATIENCE_SECONDS)
    assert refused.value.response.status_code == 503
    assert int(refused.value.response.headers["Retry-After"]) > 0
    posted = httpx.post(
        f"{topology.url}/api/v1/projects/{project}/allocations",
        json={"flavor": "h100-8x", "os_image": "ubuntu-22.04"},
        headers=world.bearer,
        timeout=PATIENCE_SECONDS,
    )
    assert_answered(posted, dependency)
    if posted.status_code == 202:
        accepted.append(posted.json()["allocation_id"])
    return accepted


def _completes(allocations: list[str], instance: str, returned_at: float) -> None:
    """Every allocation ACTIVE and the app running, within the issue's minute of the
    return; each allocation on a node of its own and the app started once."""
    deadline = returned_at + COMPLETES_WITHIN_SECONDS

    def done() -> bool:
        states = states_of(allocations)
        assert not states & {"FAILED", "RELEASED"}, states
        app = AppInstance.objects.get(pk=instance).state
        assert app not in ("failed", "stopped"), app
        return states == {"ACTIVE"} and app == "running"

    wait_for(done, timeout=max(1.0, deadline - time.monotonic()), what="the work in flight completed")
    nodes = list(Allocation.objects.filter(pk__in=allocations).values_list("node_id", flat=True))
    assert None not in nodes
    assert len(set(nodes)) == len(nodes), nodes
    twice = Allocation.objects.filter(state__in=Allocation.LIVE_STATES).values("node_id")
    assert not twice.annotate(n=Count("id")).filter(n__gt=1).exists()
    starts = AgentTask.objects.filter(instance_id=instance, action=AgentTask.Action.START)
    assert list(starts.values_list("status", flat=True)) == [AgentTask.Status.SUCCEEDED]
    assert not InstanceEvent.objects.filter(instance_id=instance, to_state="failed").exists()


def _ready_again(topology: Topology) -> None:
    """What a load balancer waits for before it sends traffic back (decision 0064: the
    pool notices PostgreSQL's return after its own backoff)."""

    def ready() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return all(
                httpx.get(f"{base}/readyz", timeout=PATIENCE_SECONDS).status_code == 200
                for base in topology.web
            )
        return False

    wait_for(ready, timeout=COMPLETES_WITHIN_SECONDS, what="ready again")


def test_redis_killed_and_restarted_empty(topology, world, placement, db_access):
    allocations = in_flight(topology, world, 2)
    instance = _launch(topology, world, placement)

    topology.redis.stop()
    down_at = time.monotonic()
    try:  # back whatever happens: the module's next test shares this Redis
        allocations += _answers_while_down(topology, world, "cache")
        time.sleep(max(0.0, DOWN_FOR_SECONDS - (time.monotonic() - down_at)))
    finally:
        topology.redis.restart()
        topology.redis.wait_ready()
    returned_at = time.monotonic()

    # No waiting for /readyz: the pooled connections Redis dropped are not handed out again.
    first_requests_succeed(topology, world)
    _completes(allocations, instance, returned_at)


def test_postgresql_crashed_and_restored(topology, world, placement, database_path, db_access):
    allocations = in_flight(topology, world, 2)
    instance = _launch(topology, world, placement)

    database_path.cut()
    down_at = time.monotonic()
    try:
        allocations += _answers_while_down(topology, world, "database")
        time.sleep(max(0.0, DOWN_FOR_SECONDS - (time.monotonic() - down_at)))
    finally:
        database_path.restore()
    returned_at = time.monotonic()

    _ready_again(topology)
    first_requests_succeed(topology, world)
    _completes(allocations, instance, returned_at)


def test_a_node_agent_killed_mid_launch_and_returned(topology, world, placement, db_access):
    """Killed while it starts the app (the task claimed, not reported): the agent that
    returns takes the launch up again and the app runs once."""
    instance = _launch(topology, world, placement)
    wait_for(lambda: _claimed(instance), timeout=START_PATIENCE_SECONDS, what="the start claimed")
    placement.agent.kill()
    time.sleep(3)
    placement.agent.start()
    returned_at = time.monotonic()

    _completes([placement.allocation], instance, returned_at)
    assert not Node.objects.get(pk=placement.node.pk).agent_offline
