"""What the benchmark scripts share: a throw-away PostgreSQL database, the
production-mode environment, the server (``manage.py serve``) and Celery worker
subprocesses, latency percentiles, CPU accounting and the report helpers.

Importing this module puts the repository root on ``sys.path``, so a script in
``benchmarks/`` can import ``apps``, ``gpuaas`` and ``tests.support`` after it.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from cryptography.fernet import Fernet  # noqa: E402

from tests.support.processes import Background, CeleryWorker, RedisServer, Server  # noqa: E402, F401 - the scripts import them from here

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpuaas",
            "beat",
            "--loglevel",
            "WARNING",
            "--schedule",
            str(Path(workdir) / "beat-schedule"),
        ]
        super().__init__(command, env, log_path)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """User+system CPU of every process in the process group (uvicorn and its workers)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[2]) == pgid:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _CLOCK_TICKS


# --- figures -----------------------------------------------------------------


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
