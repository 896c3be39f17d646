"""GPU telemetry under load, in both metrics stores.

1. Ingestion: 1,250 nodes x 8 GPUs reporting every 15 s.
   - embedded store: each node's report through ``monitoring.services.record_telemetry``
     (what ``POST /api/agent/v1/telemetry`` calls, less HTTP), averaged into minute rows;
   - VictoriaMetrics (Debian's ``victoria-metrics``): each interval's samples, in the
     Prometheus text a scrape of the 1,250 agents returns, through its import API.
   Goal: each store takes the fleet's readings at least 10 times faster than real time.
2. ``GET /api/metrics/gpu/{tenant_id}`` for a tenant of 100 nodes (8 GPUs each) over
   the last 24 h at a 60 s step (3,200 series of 1,441 points), served by the real
   ASGI app (``manage.py serve``) in production mode, from each store. Goal: p95 < 300 ms.

    .venv/bin/python benchmarks/monitoring.py            # full run (several minutes)
    .venv/bin/python benchmarks/monitoring.py --quick    # CI smoke run
    .venv/bin/python benchmarks/monitoring.py --step 300 # the API at 5-minute points

Exits non-zero on a failed request or a wrong answer; a missed goal only prints FAIL.
Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth), ``redis-server`` and
``victoria-metrics`` (``make services metrics-db``). Everything shares the machine:
compare figures only within one run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    Server,
    benchmark_parser,
    free_port,
    hold_nodes,
    metrics_run,
    percentile,
    verdict,
)

from tests.support.victoria import VictoriaMetrics

INTERVAL = 15
INTEGRATION = {"roles": ["GPUaaS Platform Integration"]}
GPUS = 8
DAY = 86400
SERIES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_XID_ERRORS",
)


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(__doc__, quick="a small smoke run", db_name="gpuaas_bench_monitoring")
    parser.add_argument("--nodes", type=int, help="ingestion fleet (default 1,250; quick 50)")
    parser.add_argument("--intervals", type=int, help="15 s intervals ingested (default 8; quick 2)")
    parser.add_argument("--tenant-nodes", type=int, help="nodes of the queried tenant (default 100; quick 4)")
    parser.add_argument("--requests", type=int, help="API requests per store (default 5; quick 3)")
    parser.add_argument("--step", type=int, default=60, help="the API's step in seconds (default 60)")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    defaults = (50, 2, 4, 3) if args.quick else (1250, 8, 100, 5)
    for name, value in zip(("nodes", "intervals", "tenant_nodes", "requests"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.redis_url = None
    return args


def reading(gpu: int, at: float) -> dict:
    load = random.uniform(0, 100)
    return {
        "gpu": gpu,
        "uuid": f"GPU-bench-{gpu}",
        "at": at,
        "utilization": round(load, 1),
        "memory_used": 40000.0,
        "memory_free": 41559.0,
        "temperature": round(30 + 0.45 * load, 1),
        "power": round(70 + 6 * load, 1),
    }


def make_nodes(count: int, prefix: str):
    """``count`` nodes whose agents enrolled a month ago: what an agent reports is kept
    from its enrollment on, and the history ingested here is older than today."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.allocations.models import Node
    from apps.catalog.models import Flavor

    flavor, _ = Flavor.objects.get_or_create(
        name="h100-8x",
        defaults={"gpu_model": "H100", "gpus_per_node": GPUS, "cpu_cores": 112, "memory_gb": 2048},
    )
    enrolled = timezone.now() - timedelta(days=30)
    Node.objects.bulk_create(
        [
            Node(
                hostname=f"{prefix}-{i:05d}",
                flavor=flavor,
                approved=True,
                agent_address="10.0.0.1",
                enrolled_at=enrolled,
            )
            for i in range(count)
        ]
    )
    return list(
        Node.objects.filter(hostname__startswith=f"{prefix}-").select_related("flavor").order_by("hostname")
    )


def ingest_embedded(nodes, intervals: int) -> float:
    from django.db import connection

    from apps.monitoring.services import record_telemetry

    start = time.time() - intervals * INTERVAL
    began = time.perf_counter()
    for interval in range(intervals):
        at = start + interval * INTERVAL
        for node in nodes:
            record_telemetry(
                node, readings=[reading(g, at) for g in range(GPUS)], xids=[], exporter_port=None
            )
    wall = time.perf_counter() - began
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM monitoring_gpusample")
        rows = cursor.fetchone()[0]
    print(
        f"  embedded: {len(nodes) * intervals} reports in {wall:.2f} s ({rows} minute rows)", file=sys.stderr
    )
    return wall


def scrape_text(nodes, at: float) -> str:
    stamp = int(at * 1000)
    lines = []
    for node in nodes:
        for gpu in range(GPUS):
            r = reading(gpu, at)
            labels = f'gpu="{gpu}",UUID="{r["uuid"]}",Hostname="{node.hostname}",node_id="{node.pk}"'
            values = (r["utilization"], r["memory_used"], r["memory_free"], r["temperature"], r["power"], 0)
            lines.extend(
                f"{name}{{{labels}}} {value} {stamp}" for name, value in zip(SERIES, values, strict=True)
            )
    return "\n".join(lines) + "\n"


def ingest_victoria(victoria: VictoriaMetrics, nodes, intervals: int) -> float:
    start = time.time() - intervals * INTERVAL
    pages = [scrape_text(nodes, start + i * INTERVAL) for i in range(intervals)]
    began = time.perf_counter()
    for page in pages:
        httpx.post(
            f"{victoria.url}/api/v1/import/prometheus", content=page.encode(), timeout=120
        ).raise_for_status()
    httpx.get(f"{victoria.url}/internal/force_flush", timeout=120).raise_for_status()
    wall = time.perf_counter() - began
    samples = sum(page.count("\n") for page in pages)
    print(f"  VictoriaMetrics: {samples} samples in {wall:.2f} s", file=sys.stderr)
    return wall


def seed_tenant(tenant_nodes: int):
    """A tenant holding ``tenant_nodes`` nodes for the last 25 hours."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.tenancy.models import Project, Tenant

    tenant = Tenant.objects.create(tenant_id="bench", name="Bench", status=Tenant.Status.ACTIVE)
    project = Project.objects.create(tenant=tenant, project_id="bench", name="Bench")
    nodes = make_nodes(tenant_nodes, "tenant")
    since = timezone.now() - timedelta(hours=25)
    hold_nodes(nodes, [project], since)
    return nodes


def fill_embedded_day(nodes) -> None:
    """24 h of minute rows for every GPU of ``nodes``, written by PostgreSQL itself, and
    the coarser rows the beat's rollup makes of them (a step of 300 s reads those)."""
    from django.db import connection

    from apps.monitoring.metrics import embedded

    now = int(time.time()) // 60 * 60
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO monitoring_gpusample (node_id, gpu, uuid, resolution, ts, count, last_ts,
              utilization, memory_used, memory_free, temperature, power)
            SELECT n, g, 'GPU-bench-' || g, 60, t, 4, t + 45, random() * 100, 40000, 41559,
              30 + random() * 45, 70 + random() * 600
            FROM unnest(%s::uuid[]) AS n, generate_series(0, 7) AS g, generate_series(%s, %s, 60) AS t
            """,
            [[str(node.pk) for node in nodes], now - DAY - 600, now],
        )
    embedded.rollup()


def fill_victoria_day(victoria: VictoriaMetrics, nodes) -> None:
    """24 h at 60 s of every GPU of ``nodes`` (JSON-line import: one line a series)."""
    now = int(time.time()) // 60 * 60
    stamps = [1000 * t for t in range(now - DAY - 600, now + 1, 60)]
    for node in nodes:
        lines = []
        for gpu in range(GPUS):
            for name in SERIES[:5]:
                metric = {
                    "__name__": name,
                    "gpu": str(gpu),
                    "UUID": f"GPU-bench-{gpu}",
                    "node_id": str(node.pk),
                }
                values = [round(random.uniform(0, 100), 1) for _ in stamps]
                lines.append(json.dumps({"metric": metric, "values": values, "timestamps": stamps}))
        httpx.post(
            f"{victoria.url}/api/v1/import", content="\n".join(lines).encode(), timeout=120
        ).raise_for_status()
    httpx.get(f"{victoria.url}/internal/force_flush", timeout=120).raise_for_status()


def query_api(
    env, var_dir: str, issuer, requests: int, expected_series: int, step: int, **extra
) -> list[float]:
    server = Server(free_port(), {**env, **extra}, 1, Path(var_dir) / f"server-{len(extra)}.log")
    try:
        server.wait_ready()
        latencies = []
        with httpx.Client(timeout=120) as client:
            for attempt in range(requests + 1):
                query = {"from": str(int(time.time()) - DAY), "step": str(step)}
                # A fresh token each time: a slow answer must not outlive the caller's token.
                headers = {"Authorization": f"Bearer {issuer.token(INTEGRATION)}"}
                began = time.perf_counter()
                response = client.get(f"{server.url}/api/metrics/gpu/bench", params=query, headers=headers)
                elapsed = (time.perf_counter() - began) * 1000
                if response.status_code != 200:
                    raise RuntimeError(
                        f"GET /api/metrics/gpu answered {response.status_code}: {response.text[:300]}"
                    )
                body = response.json()
                if len(body["series"]) != expected_series:
                    raise RuntimeError(f"{len(body['series'])} series, expected {expected_series}")
                if attempt:  # the first one warms up (JWKS fetch, imports)
                    latencies.append(elapsed)
                    store = "VictoriaMetrics" if extra.get("GPUAAS_METRICS_URL") else "embedded"
                    print(f"  {store}: {elapsed:.0f} ms", file=sys.stderr)
        points = sum(len(s["points"]) for s in body["series"])
        print(
            f"  {len(body['series'])} series, {points} points, {len(response.content) / 1e6:.1f} MB",
            file=sys.stderr,
        )
        return latencies
    finally:
        server.stop()


def main() -> int:
    args = parse_args()
    with metrics_run(args, "GPU telemetry", "gpuaas-bench-mon-") as run:
        env, var_dir, issuer, victoria = run.env, run.var_dir, run.issuer, run.victoria
        Path(var_dir, "static").mkdir()
        fleet = make_nodes(args.nodes, "fleet")
        simulated = args.intervals * INTERVAL
        embedded_s = ingest_embedded(fleet, args.intervals)
        victoria_s = ingest_victoria(victoria, fleet, args.intervals)

        tenant_nodes = seed_tenant(args.tenant_nodes)
        fill_embedded_day(tenant_nodes)
        fill_victoria_day(victoria, tenant_nodes)
        series = args.tenant_nodes * GPUS * 4
        embedded_ms = query_api(env, var_dir, issuer, args.requests, series, args.step, GPUAAS_METRICS_URL="")
        victoria_ms = query_api(
            env, var_dir, issuer, args.requests, series, args.step, GPUAAS_METRICS_URL=victoria.url
        )

        print(f"## Ingestion: {args.nodes} nodes x {GPUS} GPUs, {args.intervals} intervals of {INTERVAL} s")
        for name, wall in (("embedded store", embedded_s), ("VictoriaMetrics", victoria_s)):
            speed = simulated / wall
            ok = speed >= 10
            run.failures += [] if ok else [f"ingestion {name}"]
            print(
                f"{verdict(ok)} goal: {name} ingests at >= 10x real time: {speed:.1f}x "
                f"({wall:.2f} s for {simulated} s)"
            )
        print()
        print(
            f"## GET /api/metrics/gpu: {args.tenant_nodes} nodes, 24 h, step {args.step} s, "
            f"{args.requests} requests"
        )
        for name, latencies in (("embedded store", embedded_ms), ("VictoriaMetrics", victoria_ms)):
            p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
            ok = p95 < 300
            run.failures += [] if ok else [f"API {name}"]
            print(f"{verdict(ok)} goal: {name} p95 < 300 ms: p50 {p50:.0f} ms, p95 {p95:.0f} ms")
        return 0


if __name__ == "__main__":
    sys.exit(main())
