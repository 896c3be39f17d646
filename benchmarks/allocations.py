"""Bare-metal allocations under load: an allocation storm, the single-allocation
pipeline time, and status lookups over a large history.

Sets up its own PostgreSQL database, serves the real ASGI app with
``manage.py serve`` in production mode (REDIS_URL set) and runs the provisioning
pipeline in ``celery -A gpuaas worker`` processes (prefork, 4 slots by default,
as ``docker/compose.yaml``), all on simulated hardware with zero step latency
(``GPUAAS_SIMULATED_STEP_SECONDS=0``), so the figures are the platform's own cost.
CCP is played by an httpx asyncio client with Keycloak-style JWTs from a local
JWKS issuer.

1. Single pipeline: one allocation alone, ``POST /api/baremetal-manager/allocate``
   until ACTIVE; the median of a few runs.
2. Storm: 500 allocations (count=1 each) from 50 concurrent clients, each CCP
   "Cell Administrator" of its own tenant's project (50 tenants, 10 each), onto
   500 free nodes, until all are ACTIVE. Checks every allocation became ACTIVE
   on a distinct node, no node is in two live allocations, and the simulated
   switch/MAAS/DDN/UFM state agrees. Goal:
   storm time <= 3 x single-pipeline time x (allocations / worker slots).
3. Worker crash: a few allocations on a 3 s simulated step latency, their worker
   SIGKILLed while they deploy the OS, and a replacement worker started beside
   production's beat. Checks each becomes ACTIVE with no step run twice. Goal: every
   one resumed within 60 s of the kill (the lease and the reconciler's interval).
4. Status lookups: with 10,000 nodes and 100,000 past (RELEASED/FAILED)
   allocations bulk-created over 10 tenants, ``GET /api/baremetal-manager/
   {node_id}/status`` for random nodes of the caller's tenant, sequential and
   concurrent; SQL queries per request (in process) and the query plan. Goal:
   p95 < 20 ms.

    .venv/bin/python benchmarks/allocations.py            # full run (a few minutes)
    .venv/bin/python benchmarks/allocations.py --quick    # CI smoke run

Exits non-zero on a failed request, an allocation that did not become ACTIVE, or
a node in two allocations; missing a performance goal only prints FAIL.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) and ``redis-server``
(``make services`` provides both). The run starts its own Redis: test suites empty
the shared one's databases at any moment, which loses queued tasks. Settings are
production's plus the run's own Celery queue (``benchmarks/bench_settings.py``).
Load generator, server, workers and PostgreSQL share the machine: compare figures
only within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    RESULT_HEADERS,
    ROOT,
    CeleryBeat,
    CeleryWorker,
    RedisServer,
    Result,
    Server,
    add_nodes,
    benchmark_parser,
    configure_environment,
    drop_database,
    free_port,
    group_cpu_seconds,
    h100_flavor,
    load_average,
    machine,
    percentile,
    print_table,
    recreate_database,
    seed_past_allocations,
)

from tests.support.issuer import FakeIssuer

FLAVOR = "h100-8x"
OS_IMAGE = "ubuntu-22.04"
STATUS_GOAL_MS = 20.0
STORM_FACTOR = 3.0
CRASH_RESUME_GOAL_S = 60.0


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(
        __doc__,
        quick="CI smoke run: 40 allocations, 8 clients, 1,000 nodes, 5,000 past allocations",
        db_name="gpuaas_bench_alloc",
    )
    parser.add_argument("--allocations", type=int, help="storm allocations (500; quick: 40)")
    parser.add_argument("--clients", type=int, help="concurrent storm clients, a tenant each (50; quick: 8)")
    parser.add_argument("--worker-slots", type=int, default=4, help="Celery worker concurrency (4)")
    parser.add_argument("--pool", default="prefork", choices=["prefork", "threads"], help="Celery pool")
    parser.add_argument("--web-workers", type=int, default=1, help="uvicorn worker processes (1)")
    parser.add_argument(
        "--allow-leaking-db-settings",
        action="store_true",
        help="serve with the database settings as they are even when they keep persistent "
        "connections without a pool (they leak under ASGI; default: CONN_MAX_AGE=0 then)",
    )
    parser.add_argument("--probe-requests", type=int, help="connection probe requests (200; quick: 60)")
    parser.add_argument("--single-runs", type=int, help="measured single allocations (5; quick: 2)")
    parser.add_argument("--crash-allocations", type=int, help="allocations in the worker crash (4; quick: 2)")
    parser.add_argument(
        "--crash-lease",
        type=float,
        help="seconds of the pipeline's lease in the worker crash, reconciled every half of it "
        "(the platform's own, 30 and 15; quick: 6)",
    )
    parser.add_argument("--status-nodes", type=int, help="fleet size for status lookups (10000; quick: 1000)")
    parser.add_argument("--history", type=int, help="past allocations (100000; quick: 5000)")
    parser.add_argument("--history-tenants", type=int, default=10, help="tenants owning the history (10)")
    parser.add_argument("--status-requests", type=int, help="status requests per scenario (2000; quick: 100)")
    parser.add_argument("--status-concurrency", type=int, default=4, help="clients, concurrent scenario (4)")
    parser.add_argument("--storm-timeout", type=float, default=900.0, help="seconds to wait for ACTIVE")
    parser.add_argument(
        "--redis-url",
        help="a shared Redis to use (default: a private redis-server "
        "for the run, else redis://127.0.0.1:6379/13)",
    )
    parser.add_argument("--keep-db", action="store_true", help="leave the database behind for inspection")
    args = parser.parse_args()
    args.allocations = args.allocations or (40 if args.quick else 500)
    args.clients = min(args.clients or (8 if args.quick else 50), args.allocations)
    args.single_runs = args.single_runs or (2 if args.quick else 5)
    args.crash_allocations = args.crash_allocations or (2 if args.quick else 4)
    # The smoke shows that a crash is recovered; waiting out the platform's 30 s lease
    # there would add a minute of CI for the same code path.
    args.crash_lease = args.crash_lease or (6.0 if args.quick else None)
    args.status_nodes = args.status_nodes or (1000 if args.quick else 10_000)
    args.history = args.history if args.history is not None else (5000 if args.quick else 100_000)
    args.status_requests = args.status_requests or (100 if args.quick else 2000)
    args.probe_requests = args.probe_requests or (60 if args.quick else 200)
    return args


# --- data --------------------------------------------------------------------


@dataclass
class Client:
    tenant_id: str
    project_id: str
    token: str = ""
    requests: int = 0


def seed(args) -> dict:
    """Flavor, free nodes for the single runs and the storm, one tenant per storm
    client (network, storage, quota) and a tenant for the single runs."""
    from django.core.management import call_command

    from apps.networking import services as networking
    from apps.storage import services as storage
    from apps.tenancy import quotas
    from apps.tenancy.models import Project, Tenant

    started = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    migrated = time.perf_counter()
    flavor = h100_flavor(FLAVOR)
    # +1: the unmeasured warm-up allocation; then the worker crash's and the in-process one.
    node_count = args.allocations + args.single_runs + 1 + args.crash_allocations + 1
    add_nodes(flavor, range(node_count))
    networking.load_pool(prefix="vrf", count=args.clients + 1, first_vni=50001, first_vlan=1000)

    def onboard(tenant_id: str, nodes: int) -> Client:
        tenant = Tenant.objects.create(
            tenant_id=tenant_id, name=tenant_id, realm_name=tenant_id, status=Tenant.Status.ACTIVE
        )
        project = Project.objects.create(tenant=tenant, project_id="cell-00", name="Cell 00")
        networking.assign_tenant_network(tenant)
        storage.provision_tenant_storage(tenant)
        quotas.set_quota(tenant, {"gpus": 8 * nodes, "nodes": nodes, "storage_gb": 1_000_000})
        return Client(tenant.tenant_id, project.project_id)

    per_client, extra = divmod(args.allocations, args.clients)
    clients = []
    for i in range(args.clients):
        client = onboard(f"storm-{i:03d}", 2 * (per_client + 1))  # headroom: quota is not what is measured
        client.requests = per_client + (1 if i < extra else 0)
        clients.append(client)
    # + the warm-up, the worker crash's and the in-process allocation
    solo = onboard("solo", args.single_runs + 2 + args.crash_allocations)
    return {
        "clients": clients,
        "solo": solo,
        "nodes": node_count,
        "migrate_s": migrated - started,
        "seed_s": time.perf_counter() - migrated,
    }


def seed_history(args, issuer_tenants: int) -> dict:
    """Grow the fleet to ``status_nodes`` and bulk-create ``history`` finished
    allocations over ``issuer_tenants`` tenants (two projects each), spread over
    every node and the past year."""
    from django.db import connection

    from apps.allocations.models import Allocation, Node
    from apps.catalog.models import Flavor
    from apps.tenancy.models import Project, Tenant

    started = time.perf_counter()
    flavor = Flavor.objects.get(name=FLAVOR)
    existing = Node.objects.count()
    add_nodes(flavor, range(existing, args.status_nodes))
    tenants = Tenant.objects.bulk_create(
        [
            Tenant(
                tenant_id=f"hist-{i:02d}",
                name=f"hist-{i:02d}",
                realm_name=f"hist-{i:02d}",
                status=Tenant.Status.ACTIVE,
            )
            for i in range(issuer_tenants)
        ]
    )
    projects = Project.objects.bulk_create(
        [
            Project(tenant=tenant, project_id=f"cell-{j:02d}", name=f"Cell {j:02d}")
            for tenant in tenants
            for j in range(2)
        ]
    )
    seed_past_allocations(
        projects,
        flavor,
        OS_IMAGE,
        count=args.history,
        requested_by="bench-history",
        failure_rate=0.1,
        days=365,
        rng=random.Random(42),
    )
    table = Allocation._meta.db_table
    with connection.cursor() as cursor:
        # A live table is vacuumed: drop the dead row versions the two UPDATEs left.
        cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute(f"VACUUM ANALYZE {Node._meta.db_table}")
    return {
        "seconds": time.perf_counter() - started,
        "tenants": tenants,
        "projects": projects,
        "nodes": Node.objects.count(),
        "allocations": Allocation.objects.count(),
    }


# --- load --------------------------------------------------------------------


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def allocate_body(client: Client) -> dict:
    return {
        "flavor": FLAVOR,
        "os_image": OS_IMAGE,
        "tenant_id": client.tenant_id,
        "project_id": client.project_id,
        "count": 1,
    }


@dataclass
class Post:
    client: int
    sent: float  # time.time()
    latency_ms: float
    status: int
    node_id: str = ""
    allocation_id: str = ""
    error: str = ""
    retries: int = 0  # resent after no answer (same Idempotency-Key)


# uvicorn closes a keep-alive connection idle for 5 s, httpx keeps one for 5 s: a
# request sent on a connection the server is closing that instant fails without an
# answer. Clients let idle connections go first, and resend a request that got no
# answer with the same Idempotency-Key (what the key is for: the server does the
# work once and replays its answer).
KEEPALIVE_EXPIRY = 2.0


async def _storm(base_url: str, clients: list[Client]) -> list[Post]:
    posts: list[Post] = []
    limits = httpx.Limits(
        max_connections=len(clients),
        max_keepalive_connections=len(clients),
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120.0) as http:
        # Connections first, so the storm measures requests and not TCP set-up.
        await asyncio.gather(*(http.get("/healthz") for _ in clients))

        async def run(index: int, client: Client):
            for _ in range(client.requests):
                sent, started = time.time(), time.perf_counter()
                headers = {**bearer(client.token), "Idempotency-Key": uuid.uuid4().hex}
                response, errors = None, []
                for _attempt in range(3):
                    try:
                        response = await http.post(
                            "/api/baremetal-manager/allocate", json=allocate_body(client), headers=headers
                        )
                        break
                    except httpx.TransportError as exc:
                        errors.append(repr(exc))
                elapsed_ms = (time.perf_counter() - started) * 1000
                if response is None:
                    posts.append(
                        Post(index, sent, elapsed_ms, 0, error="; ".join(errors), retries=len(errors))
                    )
                    continue
                post = Post(index, sent, elapsed_ms, response.status_code, retries=len(errors))
                if response.status_code == 202:
                    body = response.json()
                    post.node_id, post.allocation_id = body["node_id"], body["allocation_id"]
                else:
                    post.error = response.text[:300]
                if errors:
                    print(f"  storm: client {index} resent after {errors[0]}", file=sys.stderr)
                posts.append(post)

        await asyncio.gather(*(run(i, client) for i, client in enumerate(clients)))
    return posts


def wait_finished(
    allocation_ids: list[str],
    timeout: float,
    poll: float,
    stall: float = 120.0,
    sample_connections: bool = False,
) -> dict[str, tuple[str, float | None]]:
    """Poll PostgreSQL until every allocation is ACTIVE or FAILED (or nothing moved
    for ``stall`` seconds, or ``timeout``); their state and activated_at. Times come
    from ``activated_at``, so the poll interval only delays noticing."""
    from apps.allocations.models import Allocation

    deadline = time.monotonic() + timeout
    done = {Allocation.State.ACTIVE, Allocation.State.FAILED}
    rows: dict[str, tuple[str, float | None]] = {}
    seen, moved = -1, time.monotonic()
    global PEAK_CONNECTIONS
    while True:
        if sample_connections:
            PEAK_CONNECTIONS = max(PEAK_CONNECTIONS, db_connections())
        rows = {
            str(pk): (state, activated.timestamp() if activated else None)
            for pk, state, activated in Allocation.objects.filter(pk__in=allocation_ids).values_list(
                "pk", "state", "activated_at"
            )
        }
        finished = sum(1 for state, _ in rows.values() if state in done)
        if finished == len(allocation_ids):
            return rows
        now = time.monotonic()
        if finished != seen:
            seen, moved = finished, now
        if now > deadline or now - moved > stall:
            print(f"  gave up waiting: {finished} of {len(allocation_ids)} finished", file=sys.stderr)
            return rows
        time.sleep(poll)


PEAK_CONNECTIONS = 0


def db_connections() -> int:
    """Sessions connected to the run's database (web, workers and this process)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def allocate_one(server_url: str, client: Client, what: str) -> str:
    """``POST /api/baremetal-manager/allocate`` for one node; its allocation id."""
    response = httpx.post(
        f"{server_url}/api/baremetal-manager/allocate",
        json=allocate_body(client),
        headers={**bearer(client.token), "Idempotency-Key": uuid.uuid4().hex},
        timeout=60,
    )
    if response.status_code != 202:
        raise RuntimeError(f"{what}: {response.status_code} {response.text[:300]}")
    return response.json()["allocation_id"]


def single_pipeline(server_url: str, client: Client, timeout: float) -> dict:
    """One allocation alone: POST, then until ACTIVE."""
    sent, started = time.time(), time.perf_counter()
    allocation_id = allocate_one(server_url, client, "single allocation")
    latency_ms = (time.perf_counter() - started) * 1000
    state, activated = wait_finished([allocation_id], timeout, poll=0.02)[allocation_id]
    if state != "ACTIVE":
        raise RuntimeError(f"single allocation {allocation_id} ended {state}")
    return {"post_ms": latency_ms, "to_active_s": activated - sent}


def worker_crash(
    args, env: dict[str, str], var_dir: str, server_url: str, client: Client, celery_app
) -> dict:
    """Allocations deploying the OS when their worker is SIGKILLed; a replacement
    worker and the beat take them on. Seconds from the kill until each one's step ran
    again, and whether any step was run twice."""
    from apps.allocations.models import Allocation, AllocationStep

    slow = {**env, "GPUAAS_SIMULATED_STEP_SECONDS": "3"}
    if args.crash_lease:
        slow["GPUAAS_PIPELINE_LEASE_SECONDS"] = f"{args.crash_lease:g}"
        slow["GPUAAS_PIPELINE_RECONCILE_SECONDS"] = f"{args.crash_lease / 2:g}"

    def worker(name: str) -> CeleryWorker:
        log = Path(var_dir) / f"{name}.log"
        return CeleryWorker(
            slow, log, concurrency=args.crash_allocations, queue=env["GPUAAS_BENCH_QUEUE"], name=name
        )

    beat = CeleryBeat(slow, Path(var_dir) / "beat.log", var_dir)
    doomed = worker("doomed")
    replacement = None
    try:
        doomed.wait_ready(celery_app)
        ids = [allocate_one(server_url, client, "crash allocation") for _ in range(args.crash_allocations)]
        deploying = AllocationStep.objects.filter(allocation_id__in=ids, name="os_deploy", status="running")
        deadline = time.monotonic() + 120
        while deploying.count() < len(ids):
            if time.monotonic() > deadline:
                raise RuntimeError("crash allocations never reached the OS deploy")
            time.sleep(0.05)
        os.killpg(doomed.pgid, signal.SIGKILL)
        doomed.process.wait()
        killed = time.monotonic()
        replacement = worker("replacement")
        resumed: dict[str, float] = {}
        while len(resumed) < len(ids) and time.monotonic() - killed < CRASH_RESUME_GOAL_S * 3:
            still = set(map(str, deploying.values_list("allocation_id", flat=True)))
            for allocation_id in ids:
                if allocation_id not in still and allocation_id not in resumed:
                    resumed[allocation_id] = time.monotonic() - killed
            time.sleep(0.1)
        finished = wait_finished(ids, args.storm_timeout, poll=0.1)
        repeated = AllocationStep.objects.filter(allocation_id__in=ids, phase="provision", attempts__gt=1)
        return {
            "allocations": len(ids),
            "lease": f"{args.crash_lease:g} s" if args.crash_lease else "the platform's",
            "resumed_s": sorted(resumed.values()),
            "unresumed": len(ids) - len(resumed),
            "active": sum(1 for state, _ in finished.values() if state == Allocation.State.ACTIVE),
            "repeated_steps": [f"{step.allocation_id}/{step.name}" for step in repeated],
        }
    finally:
        for process in (replacement, doomed, beat):
            if process is not None:
                process.stop()


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class Storm:
    posts: list[Post]
    finished: dict[str, tuple[str, float | None]]
    first_sent: float
    last_response: float
    last_active: float
    web_cpu_s: float
    worker_cpu_s: float
    machine_busy: float
    peak_connections: int
    checks: dict[str, bool] = field(default_factory=dict)  # any NO fails the run
    checks_soft: dict[str, bool] = field(default_factory=dict)  # reported only
    notes: list[str] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.last_active - self.first_sent


def run_storm(args, server: Server, worker: CeleryWorker, clients: list[Client]) -> Storm:
    global PEAK_CONNECTIONS
    PEAK_CONNECTIONS = 0
    web_before, worker_before = group_cpu_seconds(server.pgid), group_cpu_seconds(worker.pgid)
    busy_before = machine_busy()
    posts = asyncio.run(_storm(server.url, clients))
    ids = [p.allocation_id for p in posts if p.allocation_id]
    finished = wait_finished(ids, args.storm_timeout, poll=0.1, sample_connections=True)
    busy_after = machine_busy()
    first_sent = min(p.sent for p in posts)
    last_response = max(p.sent + p.latency_ms / 1000 for p in posts)
    activations = [a for s, a in finished.values() if s == "ACTIVE" and a is not None]
    return Storm(
        posts=posts,
        finished=finished,
        first_sent=first_sent,
        last_response=last_response,
        last_active=max(activations) if activations else float("nan"),
        web_cpu_s=group_cpu_seconds(server.pgid) - web_before,
        worker_cpu_s=group_cpu_seconds(worker.pgid) - worker_before,
        machine_busy=(busy_after[0] - busy_before[0]) / max(1, busy_after[1] - busy_before[1]),
        peak_connections=PEAK_CONNECTIONS,
    )


def verify_storm(storm: Storm, clients: list[Client], expected: int) -> None:
    """Every request 202, every allocation ACTIVE on its own node, no node in two
    live allocations, node states and the simulated hardware in agreement."""
    from django.db.models import Count

    from apps.allocations.models import Allocation, AllocationStep, Node
    from apps.core import simulation
    from apps.storage.models import TenantStorage

    checks, notes = storm.checks, storm.notes
    ok_posts = [p for p in storm.posts if p.status == 202]
    checks["every POST answered 202"] = len(ok_posts) == expected == len(storm.posts)
    for post in storm.posts:
        if post.status != 202:
            notes.append(f"POST by client {post.client}: {post.status} {post.error}")
            break
    states = [s for s, _ in storm.finished.values()]
    checks["every allocation ACTIVE"] = len(states) == expected and all(s == "ACTIVE" for s in states)
    if not checks["every allocation ACTIVE"]:
        counts = {s: states.count(s) for s in set(states)}
        notes.append(f"allocation states: {counts} of {expected} (missing: {expected - len(states)})")
        failed = Allocation.objects.filter(pk__in=list(storm.finished), state="FAILED").values_list(
            "failure_reason", flat=True
        )[:3]
        notes.extend(f"failure: {reason}" for reason in failed)
    node_ids = [p.node_id for p in ok_posts]
    checks["all nodes distinct (responses)"] = len(set(node_ids)) == len(node_ids)
    mine = Allocation.objects.filter(pk__in=list(storm.finished))
    db_nodes = list(mine.values_list("node_id", flat=True))
    checks["all nodes distinct (database)"] = len(set(db_nodes)) == len(db_nodes) == expected
    doubled = (
        Allocation.objects.filter(state__in=Allocation.LIVE_STATES)
        .values("node_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    checks["no node in two live allocations"] = doubled == 0
    if doubled:
        notes.append(f"{doubled} node(s) in more than one live allocation")
    allocated = Node.objects.filter(pk__in=db_nodes, state=Node.State.ALLOCATED).count()
    checks["every allocated node ALLOCATED"] = allocated == expected
    retried = AllocationStep.objects.filter(allocation__in=mine, attempts__gt=1).count()
    if retried:
        notes.append(f"{retried} step(s) needed more than one attempt")
    # The simulated hardware: every node on its tenant's VRF, deployed, in its
    # tenant's DDN NodeMap and UFM PKey.
    tenant_of = {c.tenant_id for c in clients}
    expected_map: dict[str, set[str]] = {}
    expected_guids: dict[str, set[str]] = {}
    wrong = []
    storages = {
        s.tenant.tenant_id: s
        for s in TenantStorage.objects.select_related("tenant").filter(tenant__tenant_id__in=tenant_of)
    }
    for allocation in mine.filter(state=Allocation.State.ACTIVE).select_related("node", "tenant"):
        node, tenant_id = allocation.node, allocation.tenant.tenant_id
        port = simulation.get("ndfc", "port", node.hostname)
        machine_state = simulation.get("maas", "machine", node.hostname)
        if port is None or machine_state is None or machine_state.state.get("status") != "Deployed":
            wrong.append(node.hostname)
        expected_map.setdefault(storages[tenant_id].nodemap, set()).add(node.hostname)
        expected_guids.setdefault(storages[tenant_id].pkey, set()).add(node.ib_guid)
    checks["simulated switch ports and MAAS machines"] = not wrong
    lost_nodemap = lost_guids = 0
    for nodemap, hostnames in expected_map.items():
        resource = simulation.get("ddn", "nodemap", nodemap)
        lost_nodemap += len(hostnames - set(resource.state["nodes"] if resource else []))
    for pkey, guids in expected_guids.items():
        resource = simulation.get("ufm", "pkey", pkey)
        lost_guids += len(guids - set(resource.state["guids"] if resource else []))
    storm.checks_soft = {
        "simulated DDN NodeMaps hold every node": lost_nodemap == 0,
        "simulated UFM PKeys hold every GUID": lost_guids == 0,
    }
    if lost_nodemap or lost_guids:
        notes.append(
            f"simulated storage lost updates: {lost_nodemap} hostname(s) missing from DDN NodeMaps, "
            f"{lost_guids} GUID(s) missing from UFM PKeys (read-modify-write of one SimulatedResource "
            "row per tenant by concurrent pipelines; apps/storage/drivers)"
        )


async def _status_load(
    base_url: str,
    headers: dict,
    node_ids: list[str],
    tenant_id: str,
    requests: int,
    concurrency: int,
    seed: int,
) -> Result:
    latencies: list[float] = []
    errors = 0
    first_error: list[str] = []
    rng = random.Random(seed)
    limits = httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=KEEPALIVE_EXPIRY
    )
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30.0) as http:
        await asyncio.gather(*(http.get("/healthz") for _ in range(concurrency)))
        remaining = requests

        async def worker():
            nonlocal errors, remaining
            while remaining > 0:
                remaining -= 1
                node_id = rng.choice(node_ids)
                started = time.perf_counter()
                try:
                    response = await http.get(f"/api/baremetal-manager/{node_id}/status", headers=headers)
                except httpx.HTTPError as exc:
                    errors += 1
                    first_error.append(repr(exc))
                    continue
                elapsed = (time.perf_counter() - started) * 1000
                ok = response.status_code == 200
                if ok:
                    body = response.json()
                    ok = body["node_id"] == node_id and body["tenant_id"] == tenant_id
                if ok:
                    latencies.append(elapsed)
                else:
                    errors += 1
                    first_error.append(f"{response.status_code} {response.text[:300]}")

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - began
    if first_error:
        print(f"  status: first error: {first_error[0]}", file=sys.stderr)
    return Result("", len(latencies), errors, seconds, latencies)


def status_load(
    name: str,
    server: Server,
    headers: dict,
    node_ids: list[str],
    tenant_id: str,
    requests: int,
    concurrency: int,
    seed: int,
) -> Result:
    # Unmeasured warm-up: connections, the JWKS and this principal's rate-limit keys.
    warmup = min(50, requests)
    asyncio.run(_status_load(server.url, headers, node_ids, tenant_id, warmup, concurrency, seed + 1))
    cpu_before = group_cpu_seconds(server.pgid)
    result = asyncio.run(_status_load(server.url, headers, node_ids, tenant_id, requests, concurrency, seed))
    result.server_cpu_s = group_cpu_seconds(server.pgid) - cpu_before
    result.name = name
    return result


def web_database() -> tuple[str, bool]:
    """The production database settings (this process loaded the same): a label, and
    whether they keep persistent connections without a pool, which leaks under ASGI
    (Django's handler runs each request in its own thread context, and a connection
    left open there lingers until garbage-collected)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    age = database.get("CONN_MAX_AGE", 0)
    pool = (database.get("OPTIONS") or {}).get("pool")
    if pool:
        size = pool.get("max_size", "default") if isinstance(pool, dict) else "default"
        return f"psycopg pool (max {size} per process), CONN_MAX_AGE {age}", False
    return f"CONN_MAX_AGE {age}, no pool", age is None or age > 0


def web_env(env: dict[str, str], conn_max_age: int | None) -> dict[str, str]:
    """The web process's environment: ``conn_max_age`` in DATABASE_URL (django-environ
    reads it), or the settings as they are for None."""
    if conn_max_age is None:
        return env
    return {**env, "DATABASE_URL": f"{env['DATABASE_URL']}?conn_max_age={conn_max_age}"}


def connection_probe(
    env: dict[str, str], var_dir: str, headers: dict, node_ids: list[str], requests: int
) -> int:
    """The PostgreSQL sessions a fresh web process with the production database
    settings holds after ``requests`` sequential status requests."""
    before = db_connections()
    server = Server(free_port(), web_env(env, None), 1, Path(var_dir) / "probe.log")
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for i in range(requests):
                response = http.get(
                    f"/api/baremetal-manager/{node_ids[i % len(node_ids)]}/status", headers=headers
                )
                if response.status_code != 200:
                    print(f"  probe: {response.status_code} {response.text[:200]}", file=sys.stderr)
        return db_connections() - before
    finally:
        server.stop()


# --- in process ----------------------------------------------------------------


def status_queries(headers: dict, node_id: str) -> list[str]:
    """The SQL of one status request through the whole middleware and auth stack."""
    from django.db import connection
    from django.test import Client as TestClient
    from django.test.utils import CaptureQueriesContext

    http = TestClient(HTTP_HOST="127.0.0.1")
    extra = {f"HTTP_{key.upper().replace('-', '_')}": value for key, value in headers.items()}
    http.get(f"/api/baremetal-manager/{node_id}/status", **extra)  # warm
    with CaptureQueriesContext(connection) as queries:
        response = http.get(f"/api/baremetal-manager/{node_id}/status", **extra)
    assert response.status_code == 200, response.content[:300]
    return [q["sql"] for q in queries.captured_queries]


def explain_status(issuer_url: str, claims: dict, node_id: str) -> list[str]:
    """``EXPLAIN ANALYZE`` of ``services.for_node``'s query for this caller."""
    from django.db import connection

    from apps.allocations.models import Allocation
    from apps.tenancy import policy
    from apps.tenancy.auth import trusted_issuers
    from apps.tenancy.auth.authentication import federated_principal
    from apps.tenancy.roles import Perm

    principal = federated_principal(None, trusted_issuers.configured()[issuer_url], claims)
    queryset = (
        policy.restrict(Allocation.objects.filter(node_id=node_id), principal, Perm.ALLOCATION_VIEW)
        .select_related("tenant", "project", "flavor")
        .order_by("-created_at")[:1]
    )
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", params)
        return [row[0] for row in cursor.fetchall()]


def pipeline_in_process(client: Client) -> dict:
    """One allocate request and its whole pipeline run in this process: SQL
    queries and seconds of each (the worker's share, without the broker)."""
    from django.db import connection
    from django.test import Client as TestClient
    from django.test.utils import CaptureQueriesContext

    from apps.allocations import pipeline

    http = TestClient(HTTP_HOST="127.0.0.1")
    with CaptureQueriesContext(connection) as request_queries:
        started = time.perf_counter()
        response = http.post(
            "/api/baremetal-manager/allocate",
            allocate_body(client),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {client.token}",
        )
        request_s = time.perf_counter() - started
    assert response.status_code == 202, response.content[:300]
    allocation_id = response.json()["allocation_id"]
    with CaptureQueriesContext(connection) as pipeline_queries:
        started = time.perf_counter()
        wait = pipeline.advance(allocation_id)
        pipeline_s = time.perf_counter() - started
    from apps.allocations.models import Allocation

    state = Allocation.objects.get(pk=allocation_id).state
    return {
        "request_queries": len(request_queries.captured_queries),
        "request_ms": request_s * 1000,
        "pipeline_queries": len(pipeline_queries.captured_queries),
        "pipeline_ms": pipeline_s * 1000,
        "state": state,
        "wait": wait,
    }


def sign_in(issuer: FakeIssuer, clients: list[Client]) -> None:
    """Each client a CCP Cell Administrator of its tenant's project, for the run's length."""
    for client in clients:
        client.token = issuer.token(
            {
                "domain_id": client.tenant_id,
                "project_id": client.project_id,
                "roles": ["Cell Administrator"],
                "preferred_username": f"admin@{client.tenant_id}",
            },
            lifetime=3600,
        )


def print_setup(args, data: dict, redis_server: RedisServer | None, db_label: str, conn_max_age) -> None:
    print(f"# {machine()}")
    print(f"# load average before: {load_average()} (other work on the machine skews every figure)")
    print(
        f"# {len(data['clients'])} storm tenants + 1 solo tenant, {data['nodes']} free nodes; migrate "
        f"{data['migrate_s']:.1f} s, seed {data['seed_s']:.1f} s; {args.web_workers} web worker(s), "
        f"Celery {args.pool} x {args.worker_slots} slots, simulated drivers, zero step latency, "
        f"Redis: {'a private redis-server' if redis_server else args.redis_url}"
    )
    print(
        f"# web database connections: {db_label}"
        + (
            " (persistent connections leak under ASGI: the web process runs with CONN_MAX_AGE=0)"
            if conn_max_age == 0
            else ""
        )
    )
    sys.stdout.flush()


@dataclass
class StatusLookups:
    """The status lookups' figures (section 4), and what they were measured on."""

    history: dict
    tenant: object  # the caller's tenant and project
    project: object
    tenant_nodes: list[str]
    project_nodes: list[str]
    results: list[Result]
    web_connections: int  # held by the web process after the scenarios
    probe_connections: int  # held by a fresh one with the production settings
    server_log: str
    tenant_sql: list[str]
    project_sql: list[str]
    plan_tenant: list[str]
    plan_project: list[str]
    per_node: int  # allocations on the busiest node, the one the cell admin's plan is for


def _nodes_of(**allocations) -> list[str]:
    from apps.allocations.models import Allocation

    return [
        str(n) for n in Allocation.objects.filter(**allocations).values_list("node_id", flat=True).distinct()
    ]


def status_lookups(
    args, env: dict[str, str], var_dir: str, server: Server, issuer: FakeIssuer, conn_max_age
) -> StatusLookups:
    """Section 4 over a seeded history, on ``server`` (stopped here), then on a web process per core."""
    from django.db.models import Count

    from apps.allocations.models import Allocation

    history = seed_history(args, args.history_tenants)
    caller_tenant = history["tenants"][0]
    caller_project = history["projects"][0]
    tenant_nodes = _nodes_of(tenant=caller_tenant)
    project_nodes = _nodes_of(project=caller_project)
    tenant_claims = {
        "domain_id": caller_tenant.tenant_id,
        "roles": ["Tenant Administrator"],
        "preferred_username": "tenant-admin",
    }
    project_claims = {
        "domain_id": caller_tenant.tenant_id,
        "project_id": caller_project.project_id,
        "roles": ["Cell Administrator"],
        "preferred_username": "cell-admin",
    }
    tenant_headers = bearer(issuer.token(tenant_claims, lifetime=3600))
    project_headers = bearer(issuer.token(project_claims, lifetime=3600))
    n = args.status_requests
    c = args.status_concurrency
    tenant_id = caller_tenant.tenant_id
    results = [
        status_load("tenant admin, sequential", server, tenant_headers, tenant_nodes, tenant_id, n, 1, 1),
        status_load(
            "cell admin (project scope), sequential",
            server,
            project_headers,
            project_nodes,
            tenant_id,
            n,
            1,
            2,
        ),
        status_load(
            f"tenant admin, {c} concurrent clients", server, tenant_headers, tenant_nodes, tenant_id, n, c, 3
        ),
    ]
    web_connections = db_connections() - 1  # less this process's own
    server.stop()
    server_log = Path(server.log_path).read_text(errors="replace")
    # The concurrent scenario again with a web process per core.
    per_core = Server(free_port(), web_env(env, conn_max_age), 2, Path(var_dir) / "server2.log")
    try:
        per_core.wait_ready()
        results.append(
            status_load(
                f"tenant admin, {c} concurrent clients, 2 web processes",
                per_core,
                tenant_headers,
                tenant_nodes,
                tenant_id,
                n,
                c,
                5,
            )
        )
    finally:
        per_core.stop()
    probe_connections = connection_probe(env, var_dir, tenant_headers, tenant_nodes, args.probe_requests)

    rng = random.Random(7)
    sample_node = rng.choice(tenant_nodes)
    tenant_sql = status_queries(tenant_headers, sample_node)
    project_sql = status_queries(project_headers, rng.choice(project_nodes))
    busiest = (
        Allocation.objects.filter(tenant=caller_tenant)
        .values("node_id")
        .annotate(n=Count("id"))
        .order_by("-n")
        .values_list("node_id", flat=True)[0]
    )
    return StatusLookups(
        history=history,
        tenant=caller_tenant,
        project=caller_project,
        tenant_nodes=tenant_nodes,
        project_nodes=project_nodes,
        results=results,
        web_connections=web_connections,
        probe_connections=probe_connections,
        server_log=server_log,
        tenant_sql=tenant_sql,
        project_sql=project_sql,
        plan_tenant=explain_status(issuer.issuer, tenant_claims, sample_node),
        plan_project=explain_status(issuer.issuer, project_claims, str(busiest)),
        per_node=Allocation.objects.filter(node_id=busiest).count(),
    )


# --- report ------------------------------------------------------------------


def fmt_ms(value: float) -> str:
    return f"{value:.1f}"


def report_single(args, singles: list[dict], single_s: float) -> None:
    print()
    print(f"Single allocation alone, request -> ACTIVE ({args.single_runs} runs after one warm-up):")
    print()
    print_table(
        ["run", "POST ms", "request -> ACTIVE s"],
        [[i + 1, fmt_ms(r["post_ms"]), f"{r['to_active_s']:.3f}"] for i, r in enumerate(singles)],
    )
    print()
    print(f"single-pipeline time (median): {single_s:.3f} s")


def _to_active(storm: Storm) -> list[float]:
    """Seconds from each POST to its allocation's ACTIVE, shortest first."""
    to_active = []
    for post in storm.posts:
        state, activated = storm.finished.get(post.allocation_id, ("", None))
        if state == "ACTIVE" and activated is not None:
            to_active.append(activated - post.sent)
    return sorted(to_active)


def report_storm(args, storm: Storm, clients: list[Client], single_s: float) -> list[str]:
    """The storm's figures, checks and goal; the failures."""
    expected = args.allocations
    ok_latencies = [p.latency_ms for p in storm.posts if p.status == 202]
    to_active = _to_active(storm)
    print()
    print(
        f"Allocation storm: {expected} allocations (count=1) from {len(clients)} concurrent "
        f"clients, each CCP Cell Administrator of its own tenant's project ({len(clients)} "
        "tenants), "
        f"{expected} free nodes, Celery {args.pool} x {args.worker_slots} worker slots, "
        f"{args.web_workers} web process(es):"
    )
    print()
    wall = storm.wall_s
    posts_s = storm.last_response - storm.first_sent
    print_table(
        ["figure", "value"],
        [
            ["wall time, first request -> last ACTIVE", f"{wall:.2f} s"],
            ["all POSTs answered after", f"{posts_s:.2f} s"],
            ["throughput (allocations ACTIVE per second)", f"{expected / wall:.1f}"],
            ["POST throughput (requests per second)", f"{len(storm.posts) / posts_s:.1f}"],
            [
                "POST latency p50 / p95 / p99",
                f"{percentile(ok_latencies, 50):.0f} / "
                f"{percentile(ok_latencies, 95):.0f} / {percentile(ok_latencies, 99):.0f} ms",
            ],
            [
                "request -> ACTIVE per allocation p50 / p95 / max",
                f"{percentile(to_active, 50):.2f} / {percentile(to_active, 95):.2f} / "
                f"{(to_active[-1] if to_active else float('nan')):.2f} s",
            ],
            ["errors (non-202 answers)", str(sum(1 for p in storm.posts if p.status != 202))],
            [
                "requests resent after no answer (same Idempotency-Key)",
                str(sum(p.retries for p in storm.posts)),
            ],
            ["web CPU per allocation (uvicorn)", f"{storm.web_cpu_s * 1000 / expected:.1f} ms"],
            ["worker CPU per allocation (Celery)", f"{storm.worker_cpu_s * 1000 / expected:.1f} ms"],
            ["machine CPU busy during the storm", f"{storm.machine_busy * 100:.0f} %"],
            ["PostgreSQL sessions on the run's database, peak", str(storm.peak_connections)],
        ],
    )
    print()
    for name, ok in [*storm.checks.items(), *storm.checks_soft.items()]:
        print(f"check: {name}: {'yes' if ok else 'NO'}")
    for note in storm.notes:
        print(f"note: {note}")
    bound = STORM_FACTOR * single_s * expected / args.worker_slots
    verdict = "PASS" if wall <= bound else "FAIL"
    print()
    print(
        f"goal: storm time <= {STORM_FACTOR:g} x single-pipeline time x ({expected} / "
        f"{args.worker_slots} worker slots)"
    )
    print(
        f"      {wall:.2f} s <= {STORM_FACTOR:g} x {single_s:.3f} s x "
        f"{expected / args.worker_slots:g} = {bound:.2f} s: {verdict}"
    )
    print(
        f"      (storm time / single-pipeline time = {wall / single_s:.0f}; "
        f"ideal with {args.worker_slots} parallel slots {expected / args.worker_slots:g})"
    )
    return [] if all(storm.checks.values()) else ["storm checks"]


def report_crash(crash: dict) -> list[str]:
    """The worker crash's figures and goal; the failures."""
    print()
    worst = max(crash["resumed_s"], default=float("inf"))
    resumed_ok = not crash["unresumed"] and worst <= CRASH_RESUME_GOAL_S
    print(
        f"Worker crash: {crash['allocations']} allocations deploying the OS (3 s simulated steps) "
        f"when their worker was SIGKILLed; a replacement worker started beside the beat "
        f"(pipeline lease: {crash['lease']}):"
    )
    print(f"      resumed after {', '.join(f'{t:.1f}' for t in crash['resumed_s']) or 'never'} s")
    print(
        f"      ACTIVE: {crash['active']} of {crash['allocations']}; steps run twice: "
        f"{', '.join(crash['repeated_steps']) or 'none'}"
    )
    print(
        f"goal: resumed within {CRASH_RESUME_GOAL_S:g} s of the kill: "
        f"{worst:.1f} s: {'PASS' if resumed_ok else 'FAIL'}"
    )
    if crash["active"] != crash["allocations"] or crash["repeated_steps"]:
        return ["worker crash"]
    return []


def report_status(args, status: StatusLookups, db_label: str, conn_max_age) -> list[str]:
    """The status lookups' figures, queries, plans and database sessions; the failures."""
    history = status.history
    print()
    print(
        f"Status lookups: {history['nodes']} nodes, {history['allocations']} allocations "
        f"({args.history} past RELEASED/FAILED over {args.history_tenants} tenants, bulk-created "
        f"in {history['seconds']:.1f} s, then VACUUM ANALYZE); caller tenant "
        f"{status.tenant.tenant_id} has allocations on {len(status.tenant_nodes)} nodes, its project "
        f"{status.project.project_id} on {len(status.project_nodes)}; random nodes among those, "
        f"{args.status_requests} requests per scenario:"
    )
    print()
    print_table(
        [*RESULT_HEADERS, "p95 < 20 ms"],
        [[*r.cells(fmt_ms), "PASS" if r.percentile(95) < STATUS_GOAL_MS else "FAIL"] for r in status.results],
    )
    print()
    print(
        f"SQL queries per status request (in process, CaptureQueriesContext): tenant admin "
        f"{len(status.tenant_sql)}, cell admin {len(status.project_sql)}"
    )
    for sql in status.project_sql:
        print(f"    {sql[:160]}{'...' if len(sql) > 160 else ''}")
    print()
    print("Plan of the status query, tenant admin, a random node:")
    _print_plan(status.plan_tenant)
    print()
    print(f"Plan of the status query, cell admin, the caller's busiest node ({status.per_node} allocations):")
    _print_plan(status.plan_project)
    print()
    web_setting = db_label if conn_max_age is None else "CONN_MAX_AGE 0"
    print(
        f"PostgreSQL sessions: the web process ({web_setting}) held {status.web_connections} after the "
        f"status scenarios; a fresh web process with the production settings ({db_label}) holds "
        f"{status.probe_connections} after {args.probe_requests} sequential status requests"
    )
    return ["status errors"] if any(r.errors for r in status.results) else []


def _print_plan(lines: list[str]) -> None:
    for line in lines:
        print("    " + line)


def report_in_process(in_process: dict) -> None:
    print()
    print(
        f"In process (no broker, no HTTP): allocate request {in_process['request_queries']} SQL "
        f"queries / {in_process['request_ms']:.0f} ms; its whole pipeline to {in_process['state']} "
        f"{in_process['pipeline_queries']} SQL queries / {in_process['pipeline_ms']:.0f} ms"
    )


def report_traceback(server_log: str) -> None:
    if "Traceback" in server_log:
        print()
        print("note: the server log holds a traceback:")
        print(server_log[server_log.index("Traceback") :][:2000])


# --- main --------------------------------------------------------------------


def main() -> int:
    args = parse_args()
    port = free_port()
    issuer = FakeIssuer()
    queue = f"bench-alloc-{secrets.token_hex(4)}"
    recreate_database(args.db_name)
    server = worker = redis_server = None
    try:
        with tempfile.TemporaryDirectory(prefix="gpuaas-bench-") as var_dir:
            if args.redis_url is None and RedisServer.available():
                redis_server = RedisServer(free_port(), Path(var_dir) / "redis.log", var_dir)
                redis_server.wait_ready()
                args.redis_url = redis_server.url
            args.redis_url = args.redis_url or "redis://127.0.0.1:6379/13"
            env = configure_environment(
                args,
                issuer,
                port,
                var_dir,
                DJANGO_SETTINGS_MODULE="benchmarks.bench_settings",
                GPUAAS_BENCH_QUEUE=queue,
                GPUAAS_SIMULATED_STEP_SECONDS="0",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            )
            Path(var_dir, "static").mkdir()  # production serves collected files from here; none are needed
            import django

            django.setup()
            from gpuaas.celery import app as celery_app

            data = seed(args)
            clients: list[Client] = data["clients"]
            solo: Client = data["solo"]
            db_label, leaks = web_database()
            conn_max_age = 0 if leaks and not args.allow_leaking_db_settings else None
            print_setup(args, data, redis_server, db_label, conn_max_age)

            server = Server(port, web_env(env, conn_max_age), args.web_workers, Path(var_dir) / "server.log")
            worker = CeleryWorker(
                env,
                Path(var_dir) / "worker.log",
                concurrency=args.worker_slots,
                pool=args.pool,
                queue=queue,
                name=queue,
            )
            server.wait_ready()
            worker.wait_ready(celery_app)
            sign_in(issuer, [*clients, solo])

            # 1. The single pipeline: one unmeasured warm-up (JWKS fetch, worker imports), then the runs.
            single_pipeline(server.url, solo, args.storm_timeout)
            singles = [single_pipeline(server.url, solo, args.storm_timeout) for _ in range(args.single_runs)]
            single_s = statistics.median(run["to_active_s"] for run in singles)
            runs = ", ".join(f"{run['to_active_s']:.3f}" for run in singles)
            print(f"  single pipeline: {runs} s", file=sys.stderr)

            # 2. The storm.
            storm = run_storm(args, server, worker, clients)
            verify_storm(storm, clients, args.allocations)
            print(f"  storm: {storm.wall_s:.1f} s", file=sys.stderr)
            worker.stop(timeout=60)

            # 3. A worker crash mid-provisioning.
            crash = worker_crash(args, env, var_dir, server.url, solo, celery_app)
            print(f"  worker crash: resumed after {crash['resumed_s']} s", file=sys.stderr)

            # 4. Status lookups over history.
            status = status_lookups(args, env, var_dir, server, issuer, conn_max_age)
            spare = Client(solo.tenant_id, solo.project_id, solo.token)
            in_process = pipeline_in_process(spare)

            report_single(args, singles, single_s)
            failures = [
                *report_storm(args, storm, clients, single_s),
                *report_crash(crash),
                *report_status(args, status, db_label, conn_max_age),
            ]
            report_in_process(in_process)
            report_traceback(status.server_log)
            print()
            print(f"# load average after: {load_average()}")
            if failures:
                print(f"FAILED: {', '.join(failures)}")
            from django.db import connections

            connections.close_all()
            return 1 if failures else 0
    finally:
        for process in (worker, server):
            if process is not None:
                process.stop()
        issuer.close()
        if redis_server is not None:
            redis_server.stop()
        elif args.redis_url:
            _drop_queue(args.redis_url, queue)
        if not args.keep_db:
            drop_database(args.db_name)


def _drop_queue(redis_url: str, queue: str) -> None:
    """The run's Celery queue and its binding (tasks published after the worker stopped)."""
    try:
        import redis

        client = redis.Redis.from_url(redis_url)
        client.delete(queue, f"_kombu.binding.{queue}")
        client.close()
    except Exception as exc:  # noqa: BLE001 - cleanup must not hide the run's own outcome
        print(f"could not drop the queue {queue}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
