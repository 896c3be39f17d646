"""What the benchmark scripts share: a throw-away PostgreSQL database, the
production-mode environment, the server (``manage.py serve``) and Celery worker
subprocesses, a portal with a node agent, a metrics run with its own Redis and
VictoriaMetrics, latency percentiles, CPU and memory accounting and the report helpers.

Importing this module puts the repository root on ``sys.path``, so a script in
``benchmarks/`` can import ``apps``, ``gpuaas`` and ``tests.support`` after it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import secrets
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from cryptography.fernet import Fernet  # noqa: E402

from tests.support.issuer import FakeIssuer  # noqa: E402
from tests.support.processes import (  # noqa: E402, F401 - the scripts import them from here
    Background,
    CeleryWorker,
    RedisServer,
    Server,
    celery_command,
    free_port,
    wait_for,
)
from tests.support.victoria import VictoriaMetrics  # noqa: E402

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


# --- command line --------------------------------------------------------------


def benchmark_parser(doc: str, *, quick: str, db_name: str) -> argparse.ArgumentParser:
    """A benchmark's command line, its module docstring as the help, with the options
    every benchmark takes: ``--quick``, the CI smoke run (``quick`` says what it
    does), and ``--db-name``, its own database (``db_name`` by default)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--db-name", default=db_name)
    return parser


# --- database ----------------------------------------------------------------


def recreate_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed_jupyterlab_allocation(
    *, flavor_name: str, gpus: int, cpu_cores: int, memory_gb: int, **node
) -> dict:
    """Migrate, then a tenant and project (quota 8 GPUs, 1 node) holding an ACTIVE
    allocation of a whole node of flavor ``flavor_name`` (``gpus`` H100s; ``node`` sets
    more of the Node's fields), and JupyterLab published: ``tenant``, ``project``,
    ``node``, ``allocation``, ``app``. Needs Django set up."""
    from django.core.management import call_command

    from apps.allocations.models import Allocation, Node
    from apps.catalog import services as catalog
    from apps.catalog.models import App, Flavor
    from apps.tenancy import quotas
    from apps.tenancy.models import Project, Tenant

    call_command("migrate", verbosity=0, interactive=False)
    tenant = Tenant.objects.create(tenant_id="bench", name="Bench", status=Tenant.Status.ACTIVE)
    project = Project.objects.create(tenant=tenant, project_id="bench", name="Bench")
    quotas.set_quota(tenant, {"gpus": 8, "nodes": 1})
    flavor = Flavor.objects.create(
        name=flavor_name, gpu_model="H100", gpus_per_node=gpus, cpu_cores=cpu_cores, memory_gb=memory_gb
    )
    node = Node.objects.create(
        hostname="bench-node-1", flavor=flavor, state=Node.State.ALLOCATED, approved=True, **node
    )
    allocation = Allocation.objects.create(
        node=node,
        tenant=tenant,
        project=project,
        flavor=flavor,
        gpus=gpus,
        os_image="ubuntu-22.04",
        state=Allocation.State.ACTIVE,
        progress=100,
        requested_by="benchmark",
    )
    manifest = json.loads((ROOT / "apps/catalog/shipped/jupyterlab.json").read_text())
    app = App.objects.create(slug="jupyterlab", name="JupyterLab", entitled_to_all=True)
    catalog.publish_version(None, app, version="1.0.0", manifest=manifest)
    return {"tenant": tenant, "project": project, "node": node, "allocation": allocation, "app": app}


def h100_flavor(name: str):
    """The 8-GPU H100 flavor the benchmarks' fleets are made of, priced as the demo's."""
    from apps.catalog.models import Flavor

    return Flavor.objects.create(
        name=name,
        gpu_model="H100",
        gpus_per_node=8,
        cpu_cores=112,
        memory_gb=2048,
        rate_per_node_hour="98.32",
    )


def add_nodes(flavor, numbers) -> None:
    """Available, approved nodes ``gpu-NNNNN`` of the flavor, 32 to a leaf switch and rack."""
    from apps.allocations.models import Node

    Node.objects.bulk_create(
        [
            Node(
                hostname=f"gpu-{i:05d}",
                flavor=flavor,
                state=Node.State.AVAILABLE,
                approved=True,
                ib_guid=f"0x{i:016x}",
                switch_serial=f"LEAF{i // 32:03d}",
                switch_port=f"Eth1/{i % 32 + 1}",
                rack=f"r{i // 32:03d}",
            )
            for i in numbers
        ],
        batch_size=2000,
    )


def hold_nodes(nodes, projects, since) -> None:
    """Each node held whole by an ACTIVE allocation since ``since``, the projects taking
    the nodes in turn."""
    from apps.allocations.models import Allocation

    Allocation.objects.bulk_create(
        [
            Allocation(
                node=node,
                tenant=project.tenant,
                project=project,
                flavor=node.flavor,
                gpus=node.flavor.gpus_per_node,
                os_image="ubuntu-22.04",
                state=Allocation.State.ACTIVE,
                activated_at=since,
                requested_by="bench",
            )
            for node, project in zip(nodes, itertools.cycle(projects))
        ]
    )


def seed_past_allocations(
    projects: list,
    flavor,
    os_image: str,
    *,
    count: int,
    requested_by: str,
    failure_rate: float,
    days: int,
    rng,
) -> None:
    """``count`` finished allocations (released, or failed at the OS deploy) on the fleet's
    nodes, in ``projects`` at random, created over the past ``days`` days and each done
    within 30 (and by now): a platform's history, written in bulk and marked ``requested_by``."""
    from django.db import connection

    from apps.allocations.models import Allocation, Node

    nodes = list(Node.objects.values_list("id", flat=True))
    batch = []
    for _ in range(count):
        project = rng.choice(projects)
        failed = rng.random() < failure_rate
        batch.append(
            Allocation(
                node_id=rng.choice(nodes),
                tenant_id=project.tenant_id,
                project=project,
                flavor=flavor,
                gpus=8,
                os_image=os_image,
                requested_by=requested_by,
                state=Allocation.State.FAILED if failed else Allocation.State.RELEASED,
                progress=70 if failed else 100,
                failure_reason="os_deploy failed after 1 attempt(s)" if failed else "",
            )
        )
        if len(batch) == 5000:
            Allocation.objects.bulk_create(batch)
            batch = []
    Allocation.objects.bulk_create(batch)
    table = Allocation._meta.db_table
    with connection.cursor() as cursor:
        # auto_now_add stamped every row "now": spread them over the past instead.
        cursor.execute(
            f"UPDATE {table} SET created_at = now() - random() * %s * interval '1 day' "
            "WHERE requested_by = %s",
            [days, requested_by],
        )
        cursor.execute(
            f"UPDATE {table} SET activated_at = CASE WHEN state = 'RELEASED' "
            "THEN created_at + interval '20 minutes' END, "
            "finished_at = LEAST(now(), created_at + random() * interval '30 days'), "
            "updated_at = LEAST(now(), created_at + interval '30 days') WHERE requested_by = %s",
            [requested_by],
        )


def configure_environment(args, issuer, port: int, var_dir: str, **extra: str) -> dict[str, str]:
    """Production mode (PostgreSQL ``args.db_name``, Redis ``args.redis_url``, debug off),
    trusting ``issuer`` (a ``tests.support.issuer.FakeIssuer``); ``extra`` adds or
    overrides variables. Set in this process too, and returned for subprocesses."""
    env = {
        "DJANGO_SETTINGS_MODULE": "gpuaas.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{args.db_name}",
        "REDIS_URL": args.redis_url,
        "GPUAAS_SECRET_KEY": secrets.token_urlsafe(50),
        "GPUAAS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "GPUAAS_DEBUG": "false",
        "GPUAAS_HTTPS": "false",
        "GPUAAS_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "GPUAAS_ISSUER": f"http://127.0.0.1:{port}",
        "GPUAAS_TRUSTED_ISSUERS": json.dumps([issuer.config]),
        "GPUAAS_VAR_DIR": var_dir,
        "GPUAAS_PATH_ROUTES": "accept-risk",  # one host, no wildcard DNS: routes under /w/
        "GPUAAS_LOG_LEVEL": "WARNING",
        "GPUAAS_LOG_FORMAT": "json",  # in each process's output, the log the scripts read
        # The per-principal limit (1200/min by default) would answer 429 within a
        # second; the throttle still runs on every request, it just never trips.
        "GPUAAS_API_RATE_LIMIT": "100000000/min",
        **extra,
    }
    os.environ.update(env)
    return env


# --- subprocesses --------------------------------------------------------------


class CeleryBeat(Background):
    """``celery -A gpuaas beat``: the periodic tasks (the allocation reconciler among
    them), with its schedule file under ``workdir``."""

    def __init__(self, env: dict[str, str], log_path: Path, workdir: str):
        super().__init__(
            celery_command("beat", "--schedule", str(Path(workdir) / "beat-schedule")), env, log_path
        )


@contextlib.contextmanager
def portal_with_agent(args, prefix: str, seed, *agent_options: str, note: str = ""):
    """The portal in production mode (one web process) on a database and var dir of the
    run's own, seeded by ``seed()`` (Django set up; it returns a dict whose ``node`` the
    agent serves), and ``python -m node_agent`` (process executor, more ``agent_options``)
    enrolled on that node. Prints the machine and the load average (then ``note``) before
    starting them. Yields ``(server, seeded, var_dir)``; stops both and drops the database after."""
    port = free_port()
    issuer = FakeIssuer()  # production settings want a trusted issuer; nothing here uses it
    recreate_database(args.db_name)
    server = agent = None
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as var_dir:
            env = configure_environment(args, issuer, port, var_dir)
            Path(var_dir, "static").mkdir()
            import django

            django.setup()
            seeded = seed()
            from apps.allocations import nodes

            print(f"# {machine()}")
            print(f"# load average before: {load_average()}{note}")
            server = Server(port, env, 1, Path(var_dir) / "server.log")
            server.wait_ready()
            node = seeded["node"]
            agent = Background(
                [
                    *(sys.executable, "-m", "node_agent", "--url", server.url, "--node", node.hostname),
                    *("--state-dir", str(Path(var_dir) / "agent"), "--executor", "process", *agent_options),
                ],
                {**env, "GPUAAS_BOOTSTRAP_TOKEN": nodes.issue_bootstrap_token(node)},
                Path(var_dir) / "agent.log",
            )
            wait_for(
                lambda: type(node).objects.filter(pk=node.pk, credential_hash__gt="").exists(),
                timeout=60,
                what="the agent to enroll",
                interval=0.05,
            )
            yield server, seeded, var_dir
    finally:
        for process in (agent, server):
            if process is not None:
                process.stop()
        issuer.close()
        drop_database(args.db_name)


@dataclass
class MetricsRun:
    env: dict[str, str]
    var_dir: str
    issuer: FakeIssuer
    victoria: VictoriaMetrics
    failures: list[str]  # goals missed, said after the figures


@contextlib.contextmanager
def metrics_run(args, title: str, prefix: str, **extra: str):
    """A database, a Redis and a VictoriaMetrics of the run's own, production mode (with
    ``extra``) and Django set up and migrated, under the heading of the ``title`` benchmark.
    Yields a ``MetricsRun``; after it, the load average and the goals missed, then stops them
    and drops the database (unless ``--keep-db``)."""
    issuer = FakeIssuer()
    recreate_database(args.db_name)
    redis_server = victoria = None
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as var_dir:
            redis_server = RedisServer(free_port(), Path(var_dir) / "redis.log", var_dir)
            redis_server.wait_ready()
            args.redis_url = redis_server.url
            env = configure_environment(
                args, issuer, free_port(), var_dir, GPUAAS_METRICS_URL="", PYTHONPATH=str(ROOT), **extra
            )
            import django

            django.setup()
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0, interactive=False)
            victoria = VictoriaMetrics(Path(var_dir) / "victoria-metrics")
            print(f"# {title} benchmark ({'quick' if args.quick else 'full'} run)")
            print(f"# {machine()}; load average before: {load_average()}")
            print()
            run = MetricsRun(env, var_dir, issuer, victoria, [])
            yield run
            print()
            print(f"# load average after: {load_average()}")
            if run.failures:
                print(f"goals missed: {', '.join(run.failures)}")
            connections.close_all()
    finally:
        if victoria is not None:
            victoria.stop()
        if redis_server is not None:
            redis_server.stop()
        issuer.close()
        if not args.keep_db:
            drop_database(args.db_name)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _group_stats(pgid: int):
    """The fields after the command name of ``/proc/<pid>/stat``, for each process in the group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[2]) == pgid:  # pgrp
            yield fields


def group_cpu_seconds(pgid: int) -> float:
    """User+system CPU of every process in the process group (uvicorn and its workers)."""
    return sum(int(f[11]) + int(f[12]) for f in _group_stats(pgid)) / _CLOCK_TICKS  # utime, stime


def group_rss_bytes(pgid: int) -> int:
    """Resident memory of every process in the process group (a server and its children)."""
    return sum(int(f[21]) for f in _group_stats(pgid)) * _PAGE_SIZE  # rss pages


# --- figures -----------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (NaN for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Result:
    name: str
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    server_cpu_s: float = 0.0

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_ms_per_request(self) -> float:
        """Server CPU per request: unlike req/s, barely moved by other load on the machine."""
        return self.server_cpu_s * 1000 / self.requests if self.requests else float("nan")

    def percentile(self, p: float) -> float:
        return percentile(self.latencies_ms, p)

    def cells(self, ms=lambda value: f"{value:.1f}") -> list:
        """The row under ``RESULT_HEADERS``; ``ms`` formats the latencies."""
        return [
            self.name,
            self.requests,
            self.errors,
            f"{self.rps:.0f}",
            ms(self.percentile(50)),
            ms(self.percentile(95)),
            ms(self.percentile(99)),
            f"{self.cpu_ms_per_request:.2f}",
        ]


RESULT_HEADERS = [
    "scenario",
    "requests",
    "errors",
    "req/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "server CPU ms/req",
]


# --- report ------------------------------------------------------------------


def machine() -> str:
    """Cores, CPU model, Python, Django and PostgreSQL versions (needs Django set up)."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
    import django

    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, Django {django.get_version()}, "
        f"PostgreSQL {pg}"
    )


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print(
            "| "
            + " | ".join(
                c.rjust(w) if c[:1].isdigit() else c.ljust(w) for c, w in zip(row, widths, strict=False)
            )
            + " |"
        )
