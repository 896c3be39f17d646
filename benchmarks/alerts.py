"""Alert evaluation and delivery under load.

1. One evaluation round of every alert rule over a fleet of 1,250 nodes x 8 GPUs
   (10,000 GPUs), each with a current reading, every node heartbeating, open XID
   events and reported measurements; from the embedded store and from a real
   VictoriaMetrics. The first round opens the alerts, the second is the steady state;
   the slower counts. Goal: under 2 s.
2. From a threshold crossing (a GPU's reading written as its agent reports it) to the
   webhook received by a local CCP receiver, through the real Celery beat (every
   ``GPUAAS_ALERT_EVALUATION_SECONDS``, 15 s) and worker: ``gpu_memory_critical``
   (``for`` 0) and, in a full run, ``gpu_temperature_critical`` (``for`` 120 s).
   Goals: received within 60 s of the condition having held for the rule's ``for``,
   and within ``for`` + 20 s of the crossing.

    .venv/bin/python benchmarks/alerts.py            # full run (about 5 minutes)
    .venv/bin/python benchmarks/alerts.py --quick    # CI smoke run

Exits non-zero when something does not work (no alert, a wrong answer); a missed
goal only prints FAIL. Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust
auth), ``redis-server`` and ``victoria-metrics``. Compare figures within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import threading
import time
from pathlib import Path

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    CeleryBeat,
    CeleryWorker,
    benchmark_parser,
    hold_nodes,
    metrics_run,
    verdict,
)

from tests.support.receiver import WEBHOOK_SECRET, WebhookReceiver
from tests.support.victoria import VictoriaMetrics

GPUS = 8
HOT_XIDS = 20  # open XID events over the fleet
MEASURED = 100  # reported measurements (CPU of as many nodes)
MEMORY_MIB = 81559.0


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(__doc__, quick="a small smoke run", db_name="gpuaas_bench_alerts")
    parser.add_argument("--nodes", type=int, help="fleet size (default 1,250; quick 50)")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    if args.nodes is None:
        args.nodes = 50 if args.quick else 1250
    args.redis_url = None
    return args


def seed_fleet(count: int):
    """``count`` enrolled, heartbeating nodes of 8 GPUs, each held by one of 10
    tenants; some XID events open and some CPU measurements reported."""
    from django.utils import timezone

    from apps.allocations.models import Node
    from apps.catalog.models import Flavor
    from apps.monitoring import services as monitoring
    from apps.monitoring.alerts import services as alerts
    from apps.tenancy.models import Project, Tenant

    flavor = Flavor.objects.create(
        name="h100-8x", gpu_model="H100", gpus_per_node=GPUS, cpu_cores=112, memory_gb=2048
    )
    now = timezone.now()
    Node.objects.bulk_create(
        [
            Node(
                hostname=f"fleet-{i:05d}",
                flavor=flavor,
                approved=True,
                state=Node.State.ALLOCATED,
                agent_address="10.0.0.1",
                credential_hash="0" * 64,
                enrolled_at=now,
                last_heartbeat_at=now,
            )
            for i in range(count)
        ]
    )
    nodes = list(
        Node.objects.filter(hostname__startswith="fleet-").select_related("flavor").order_by("hostname")
    )
    projects = []
    for t in range(10):
        tenant = Tenant.objects.create(tenant_id=f"t{t}", name=f"Tenant {t}", status=Tenant.Status.ACTIVE)
        projects.append(Project.objects.create(tenant=tenant, project_id=f"p{t}", name=f"P{t}"))
    hold_nodes(nodes, projects, now)
    for i in range(min(HOT_XIDS, count)):
        monitoring.record_xid(nodes[i], i % GPUS, f"GPU-{i}", random.choice((31, 79)), now)
    for node in nodes[:MEASURED]:
        alerts.record_measurement("cpu_utilization", str(node.pk), random.uniform(20, 99), node=node)
    return nodes


def temperature(node_index: int, gpu: int) -> float:
    # One GPU in a hundred runs hot: alerts open on the first round.
    return 92.0 if (node_index * GPUS + gpu) % 100 == 0 else round(random.uniform(30, 75), 1)


def fill_embedded(nodes, at: float) -> None:
    from apps.monitoring.metrics import embedded

    for index, node in enumerate(nodes):
        embedded.write(
            node.pk,
            [
                {
                    "gpu": gpu,
                    "uuid": f"GPU-{index}-{gpu}",
                    "at": at,
                    "utilization": 50.0,
                    "memory_used": 40000.0,
                    "memory_free": MEMORY_MIB - 40000.0,
                    "temperature": temperature(index, gpu),
                    "power": 400.0,
                }
                for gpu in range(GPUS)
            ],
        )


def fill_victoria(victoria: VictoriaMetrics, nodes, at: float) -> None:
    stamp = int(at * 1000)
    lines = []
    for index, node in enumerate(nodes):
        for gpu in range(GPUS):
            labels = f'gpu="{gpu}",UUID="GPU-{index}-{gpu}",Hostname="{node.hostname}",node_id="{node.pk}"'
            for name, value in (
                ("DCGM_FI_DEV_GPU_TEMP", temperature(index, gpu)),
                ("DCGM_FI_DEV_FB_USED", 40000.0),
                ("DCGM_FI_DEV_FB_FREE", MEMORY_MIB - 40000.0),
            ):
                lines.append(f"{name}{{{labels}}} {value} {stamp}")
    victoria.import_prometheus("\n".join(lines) + "\n")


def heartbeat() -> None:
    """Every fleet agent heartbeats now (they do every few seconds: the fleet is up)."""
    from django.utils import timezone

    from apps.allocations.models import Node

    Node.objects.filter(hostname__startswith="fleet-").update(last_heartbeat_at=timezone.now())


class Heartbeats(threading.Thread):
    """The fleet's agents heartbeating while the beat and worker run."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stopped = threading.Event()

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stopped.wait(5):
                heartbeat()
        finally:
            connection.close()


def one_round(label: str) -> float:
    from apps.monitoring.alerts import evaluation
    from apps.monitoring.models import Alert

    seconds = []
    for _ in range(2):
        heartbeat()
        done = evaluation.evaluate()
        if done is None:
            raise RuntimeError("the evaluator's lease was held")
        seconds.append(done.seconds)
    opened = Alert.objects.count()
    if not opened:
        raise RuntimeError(f"{label}: no alert opened over the fleet")
    print(f"  {label}: rounds of {seconds[0]:.2f} s and {seconds[1]:.2f} s, {opened} alerts", file=sys.stderr)
    return max(seconds)


def crossing(receiver: WebhookReceiver, node, rule: str, reading: dict, timeout: float) -> float:
    """Seconds from the reading written (as its agent reports it) to the alert received."""
    from apps.monitoring.services import record_telemetry

    began = time.monotonic()
    record_telemetry(
        node,
        readings=[
            {"gpu": 0, "uuid": "GPU-cross", "at": time.time(), "power": 400.0, "utilization": 90.0, **reading}
        ],
        xids=[],
        exporter_port=None,
    )
    while time.monotonic() - began < timeout:
        for request in list(receiver.requests):
            body = json.loads(request["body"])
            if body["rule"] == rule and body["node_id"] == str(node.pk) and body["state"] == "firing":
                if not request["verified"]:
                    raise RuntimeError("the alert's signature did not verify")
                return time.monotonic() - began
        time.sleep(0.1)
    raise RuntimeError(f"{rule} was not received within {timeout:.0f} s")


def cross_node(hostname: str):
    from apps.allocations.models import Allocation, Node

    template = Allocation.objects.select_related("node").first()
    node = Node.objects.create(
        hostname=hostname,
        flavor=template.flavor,
        approved=True,
        state=Node.State.ALLOCATED,
        agent_address="10.0.0.1",
        enrolled_at=template.activated_at,  # its agent's readings are kept from then on
    )
    Allocation.objects.create(
        node=node,
        tenant=template.tenant,
        project=template.project,
        flavor=template.flavor,
        gpus=GPUS,
        os_image="ubuntu-22.04",
        state=Allocation.State.ACTIVE,
        activated_at=template.activated_at,
        requested_by="bench",
    )
    return node


def delivery_latencies(args, env, var_dir: str, receiver: WebhookReceiver) -> list[tuple[str, int, float]]:
    from apps.monitoring.models import AlertRule
    from gpuaas.celery import app

    heartbeats = Heartbeats()
    heartbeats.start()
    worker = CeleryWorker(env, Path(var_dir) / "worker.log", concurrency=2)
    beat = CeleryBeat(env, Path(var_dir) / "beat.log", var_dir)
    try:
        worker.wait_ready(app)
        rules = ["gpu_memory_critical"] + ([] if args.quick else ["gpu_temperature_critical"])
        readings = {
            "gpu_memory_critical": {
                "memory_used": 80000.0,
                "memory_free": MEMORY_MIB - 80000.0,
                "temperature": 50.0,
            },
            "gpu_temperature_critical": {
                "memory_used": 1000.0,
                "memory_free": MEMORY_MIB - 1000.0,
                "temperature": 95.0,
            },
        }
        measured = []
        for index, rule in enumerate(rules):
            for_seconds = AlertRule.objects.get(name=rule).for_seconds
            node = cross_node(f"cross-{index:05d}")
            latency = crossing(receiver, node, rule, readings[rule], timeout=for_seconds + 120)
            beat.check_alive("celery beat")
            measured.append((rule, for_seconds, latency))
        return measured
    finally:
        heartbeats.stopped.set()
        heartbeats.join()
        beat.stop()
        worker.stop()


def main() -> int:
    args = parse_args()
    with (
        contextlib.closing(WebhookReceiver(secret=WEBHOOK_SECRET)) as receiver,
        metrics_run(
            args,
            "Alerts",
            "gpuaas-bench-alerts-",
            GPUAAS_CCP_WEBHOOK_URL=receiver.url,
            GPUAAS_CCP_WEBHOOK_SECRET=WEBHOOK_SECRET,
            GPUAAS_ALERT_EVALUATION_SECONDS="15",
        ) as run,
    ):
        from django.conf import settings

        from apps.monitoring.models import Alert

        victoria = run.victoria
        nodes = seed_fleet(args.nodes)
        # The fleet's readings in the minute before this one: a crossing written now
        # is the newest reading of its GPU in either store.
        at = (int(time.time()) // 60 - 1) * 60 + 30
        fill_embedded(nodes, at)
        fill_victoria(victoria, nodes, at)
        embedded_s = one_round("embedded store")
        Alert.objects.all().delete()
        settings.METRICS_URL = victoria.url
        victoria_s = one_round("VictoriaMetrics")
        settings.METRICS_URL = ""
        Alert.objects.all().delete()
        httpx.get(f"{victoria.url}/health", timeout=5).raise_for_status()

        latencies = delivery_latencies(args, run.env, run.var_dir, receiver)

        gpus = args.nodes * GPUS
        print(f"## One evaluation round of every rule over {gpus:,} GPUs")
        for name, seconds in (("embedded store", embedded_s), ("VictoriaMetrics", victoria_s)):
            ok = seconds < 2
            run.failures += [] if ok else [f"round {name}"]
            print(f"{verdict(ok)} goal: {name} round < 2 s: {seconds:.2f} s")
        print()
        print("## Threshold crossing to webhook received (evaluation every 15 s)")
        for rule, for_seconds, latency in latencies:
            # CONTRACT: within 60 s of the condition having held for the rule's ``for``.
            ok, bound = latency - for_seconds < 60, latency < for_seconds + 20
            run.failures += [] if ok and bound else [f"delivery {rule}"]
            late = f"{latency:.1f} s after the crossing, {latency - for_seconds:.1f} s after its for"
            print(f"{verdict(ok)} goal: {rule} received < 60 s after its for ({for_seconds} s): {late}")
            print(f"{verdict(bound)} goal: {rule} received < for + 20 s: {late}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
