"""Monitoring operations: what agents report (readings, XID errors, where they
serve metrics), the scrape targets file, simulated readings for drills, and
operators resolving XID events; open allocation pages told that their charts have
new points. The read side is ``series`` and ``metrics``."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from apps.allocations import events as allocation_events
from apps.allocations.models import Allocation, Node
from apps.core import audit, simulation
from apps.core.errors import InvalidState, NotFound
from apps.monitoring import xid
from apps.monitoring.alerts.services import record_measurement
from apps.monitoring.metrics import embedded
from apps.monitoring.models import NodeExporter, XidEvent
from apps.storage import selectors as storage_selectors
from apps.tenancy import policy
from apps.tenancy.roles import Perm

SIMULATION = ("gpu", "node")  # SimulatedResource system and kind; the key is the node's id
ALL_GPUS = "all"
HELD_READINGS = ("temperature", "utilization", "memory", "xid")
# The node's own held readings (``simulate_gpu --cpu/--node-memory``), under this key
# as the agent reports them.
NODE = "node"
NODE_READINGS = {"cpu": "cpu_utilization", "node_memory": "memory_utilization"}
# A node whose agent has not reported for this long drops out of the scrape targets.
TARGET_STALE_AFTER = timedelta(minutes=10)
EXPORTER_REFRESH = timedelta(seconds=60)
# A node's open XID events: far more than a node's GPUs ever have open at once, few
# enough that a node reporting made-up codes cannot flood the alert rounds and CCP.
MAX_OPEN_XIDS_PER_NODE = 128
# At most one "new points" hint per allocation this often, however many agent reports
# (or retries) arrive: each hint makes every open page fetch its chart window again.
LIVE_POINTS_EVERY_SECONDS = 10


def record_telemetry(
    node: Node,
    *,
    readings: list[dict],
    xids: list[dict],
    exporter_port: int | None,
    simulated: bool = False,
    cpu_utilization: float | None = None,
    memory_utilization: float | None = None,
) -> dict:
    """One agent report; answers what the agent needs for the next one (and, for an
    agent on simulated GPUs, the node's GPU count and the readings held for it). The
    node's CPU and memory utilization feed their alert rules whatever the metrics
    source: the rules read them as measurements."""
    now = timezone.now()
    if exporter_port:
        _note_exporter(node, exporter_port, now)
    readings = _own_time(node, readings, now)
    if readings and not settings.METRICS_URL:
        embedded.write(node.pk, readings)
    for metric, value in (("cpu_utilization", cpu_utilization), ("memory_utilization", memory_utilization)):
        if value is not None:
            record_measurement(metric, str(node.pk), value, node=node, label=node.hostname[:100])
    for event in _own_time(node, xids, now):
        record_xid(node, event["gpu"], event.get("uuid", ""), event["code"], _at(event["at"]))
    # With a metrics database the scraper stores the readings, on its own clock: an
    # agent's report is still the sign that the node's series moved on.
    if readings or settings.METRICS_URL:
        _announce_points(node)
    answer = {
        "report_readings": not settings.METRICS_URL,
        "interval_seconds": settings.METRICS_INTERVAL_SECONDS,
        "address": node.agent_address,
    }
    if simulated:
        held = simulation.get(*SIMULATION, str(node.pk))
        answer["gpus"] = node.flavor.gpus_per_node
        answer["held"] = held.state.get("gpus", {}) if held else {}
    return answer


def _note_exporter(node: Node, port: int, now: datetime) -> None:
    fresh = NodeExporter.objects.filter(node=node, port=port, reported_at__gte=now - EXPORTER_REFRESH)
    if not fresh.exists():
        NodeExporter.objects.update_or_create(node=node, defaults={"port": port, "reported_at": now})


def _announce_points(node: Node) -> None:
    """Open pages of the allocation holding the node refresh their charts (throttled).
    Sent after commit, so the page's fetch finds the readings; a channel layer that is
    down never fails the agent's report (``robust``)."""
    active = Allocation.objects.filter(node=node, state=Allocation.State.ACTIVE)
    held = active.values("pk", "project_id").first()
    if held is None or not cache.add(f"monitoring:live-points:{held['pk']}", 1, LIVE_POINTS_EVERY_SECONDS):
        return
    transaction.on_commit(
        lambda: allocation_events.points_arrived(held["pk"], held["project_id"]), robust=True
    )


def _own_time(node: Node, reported: list[dict], now: datetime) -> list[dict]:
    """What an agent reported, dated within its own time: readings belong to whichever
    allocation held the node when they were taken, and the node keeps its identity from
    one tenant to the next, so nothing before its agent enrolled (its credential is revoked
    at every release: an earlier tenant's time) is kept. A time ahead of now becomes now:
    the store would never age such a row out."""
    since, until = node.enrolled_at.timestamp(), now.timestamp()
    return [{**item, "at": min(item["at"], until)} for item in reported if item["at"] >= since]


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def record_xid(node: Node, gpu: int, uuid: str, code: int, at: datetime) -> XidEvent | None:
    """The open event of this GPU and code, seen once more (a retried report, with
    the same time, is not counted again), or a new one; None when the node already
    has ``MAX_OPEN_XIDS_PER_NODE`` open (what it has open already alerts)."""
    open_event = XidEvent.objects.filter(node=node, gpu=gpu, code=code, resolved_at__isnull=True)
    open_event.filter(last_seen_at__lt=at).update(last_seen_at=at, occurrences=F("occurrences") + 1)
    event = open_event.first()
    if event is not None:
        return event
    known = xid.classify(code)
    try:
        with transaction.atomic():
            # Locked: concurrent reports of one node open events in turn, within the bound.
            Node.objects.select_for_update().filter(pk=node.pk).values_list("pk").first()
            if XidEvent.objects.filter(node=node, resolved_at__isnull=True).count() >= MAX_OPEN_XIDS_PER_NODE:
                return None  # not logged either: a node reporting made-up codes would flood the log
            return XidEvent.objects.create(
                node=node,
                gpu=gpu,
                uuid=uuid,
                code=code,
                severity=known.severity,
                description=known.description,
                first_seen_at=at,
                last_seen_at=at,
            )
    except IntegrityError:  # the same event from a concurrent report: it counts once
        return open_event.get()


def resolve_xid(principal, event: XidEvent, note: str = "") -> XidEvent:
    """An operator has dealt with the fault; the next occurrence opens a new event."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        done = XidEvent.objects.filter(pk=event.pk, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolved_by=principal.audit_actor, resolution_note=note[:2000]
        )
        if not done:
            raise InvalidState("This XID event is already resolved.")
        audit.record(
            principal,
            "xid_event.resolve",
            target=event,
            details={"node": str(event.node_id), "gpu": event.gpu, "code": event.code},
        )
    event.refresh_from_db()
    return event


# --- Simulated readings (``manage.py simulate_gpu``) ---------------------------------------------


def find_node(reference: str) -> Node:
    """A node by hostname or id."""
    node = Node.objects.filter(hostname=reference).first()
    if node is None:
        try:
            node = Node.objects.filter(pk=reference).first()
        except (ValueError, TypeError):  # not a UUID
            node = None
    if node is None:
        raise NotFound(f"No node {reference!r}.")
    return node


def simulate_gpu(node: Node, gpu: int | None = None, *, clear: bool = False, **readings) -> dict:
    """Hold readings on the node's GPUs (all of them when ``gpu`` is None) and on the
    node itself (``cpu``, ``node_memory``) in the simulated world, where its agent
    reads them until they are cleared; the holds now."""
    key = str(gpu) if gpu is not None else ALL_GPUS
    with simulation.locked(*SIMULATION, str(node.pk), gpus={}) as resource:
        held = dict(resource.state.get("gpus", {}))
        if clear:
            held = {k: v for k, v in held.items() if gpu is not None and k != key}
        else:
            values = {name: readings[name] for name in HELD_READINGS if readings.get(name) is not None}
            if values:
                held[key] = {**held.get(key, {}), **values}
            own = {NODE_READINGS[n]: v for n, v in readings.items() if n in NODE_READINGS and v is not None}
            if own:
                held[NODE] = {**held.get(NODE, {}), **own}
        simulation.update(resource, gpus=held)
    audit.record(
        None,
        "gpu.simulate",
        target=node,
        details={"gpu": key, "clear": clear, **{k: v for k, v in readings.items() if v is not None}},
    )
    return held


# --- Scrape targets -------------------------------------------------------------------------------


def scrape_targets(now: datetime | None = None) -> list[dict]:
    """Prometheus file_sd groups: each reporting agent's address, labelled with its
    node and, while an allocation holds it (ACTIVE), that allocation's tenant and project."""
    now = now or timezone.now()
    exporters = (
        NodeExporter.objects.filter(
            reported_at__gte=now - TARGET_STALE_AFTER, node__agent_address__isnull=False
        )
        .select_related("node")
        .order_by("node__hostname")
    )
    holding = {
        a.node_id: a
        for a in Allocation.objects.filter(state=Allocation.State.ACTIVE).select_related("tenant", "project")
    }
    groups = []
    for exporter in exporters:
        node, held = exporter.node, holding.get(exporter.node_id)
        host = f"[{node.agent_address}]" if ":" in node.agent_address else node.agent_address
        groups.append(
            {
                "targets": [f"{host}:{exporter.port}"],
                "labels": {
                    "node_id": str(node.pk),
                    "hostname": node.hostname,
                    "allocation_id": str(held.pk) if held else "",
                    "tenant_id": held.tenant.tenant_id if held else "",
                    "project_id": held.project.project_id if held else "",
                },
            }
        )
    return groups


def write_scrape_targets() -> bool:
    """Rewrite the targets file when it changed (atomically: the scraper never reads
    half a file); whether it did."""
    path = settings.METRICS_TARGETS_FILE
    text = json.dumps(scrape_targets(), indent=1, sort_keys=True)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".targets-", delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)  # the scraper runs as its own user
    os.replace(handle.name, path)
    return True


def measure_storage_latency() -> int:
    """Each tenant directory's latency, as DDN reports it, for the ``storage_latency``
    rules; how many were measured."""
    measured = 0
    for tenant, ms in storage_selectors.directory_latencies():
        if ms is not None:
            record_measurement("storage_latency", f"{tenant.pk}:storage", ms, tenant=tenant, label="storage")
            measured += 1
    return measured
