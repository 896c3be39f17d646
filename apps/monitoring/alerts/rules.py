"""What each alert rule's metric is and where its values come from.

A metric's observations are the subjects it watches with their current values:
- ``gpu_temperature``, ``gpu_memory``: each GPU's latest reading in the metrics
  source (the embedded store or PromQL), memory as percent of the GPU's memory;
- ``node_not_ready``: each enrolled node whose agent has not heartbeaten for
  ``GPUAAS_AGENT_OFFLINE_AFTER_SECONDS`` (value 1); the critical rule counts them per
  cluster (the nodes a tenant holds; unallocated nodes are the fleet's cluster);
- ``gpu_xid``: each open XID event (``XidEvent``), as the catalogue grades it;
- ``storage_quota``, ``quota``, ``cpu_utilization``, ``memory_utilization``,
  ``storage_latency``: the latest ``Measurement`` another part of the platform
  reported (``record_measurement``; quota crossings from metering's signal; a node's
  CPU and memory from its agent's telemetry; each tenant directory's latency from
  DDN, ``measure_storage_latency``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db.models import Q

from apps.allocations.models import Node
from apps.monitoring.metrics import source
from apps.monitoring.models import Measurement, XidEvent


class MetricInfo(NamedTuple):
    unit: str
    noun: str  # for summaries: "{noun} of {label} at {value}{unit}"
    # Quotas warn on reaching 80 % and 90 % (seed 001 section 4.6.3); the seed's other
    # thresholds are "above" (section 4.7.2).
    at_threshold: bool = False


METRICS: dict[str, MetricInfo] = {
    "gpu_temperature": MetricInfo(" C", "temperature"),
    "gpu_memory": MetricInfo(" %", "memory use"),
    "gpu_xid": MetricInfo("", "XID error"),
    "node_not_ready": MetricInfo("", "nodes not ready"),
    "cpu_utilization": MetricInfo(" %", "CPU utilization"),
    "memory_utilization": MetricInfo(" %", "memory utilization"),
    "storage_quota": MetricInfo(" %", "storage quota used", at_threshold=True),
    "quota": MetricInfo(" %", "quota used", at_threshold=True),
    "storage_latency": MetricInfo(" ms", "storage latency"),
}
GPU_METRICS = {"gpu_temperature", "gpu_memory", "gpu_xid"}
MEASURED = {"storage_quota", "quota", "cpu_utilization", "memory_utilization", "storage_latency"}
# Read from a node's agent: while the node is down its last reading is stale, so
# these alerts neither fire nor resolve then (decisions 0053, 0055).
NODE_BOUND = GPU_METRICS | {"cpu_utilization", "memory_utilization"}
# The critical node_not_ready rule counts the down nodes of a cluster, not one node.
CLUSTER_RULE = "node_not_ready_critical"


@dataclass
class Observation:
    subject: str
    value: float
    label: str
    node_id: str | None = None
    gpu: int | None = None
    tenant_id: object = None  # the tenant's pk, for subjects that are a tenant's own (quotas)
    severity: str | None = None  # for graded events (XID): only the rule of this severity sees it


def breaches(metric: str, value: float, threshold: float) -> bool:
    return value >= threshold if METRICS[metric].at_threshold else value > threshold


def gpu_subject(node_id, gpu) -> str:
    return f"node:{node_id}:gpu:{gpu}"


def collect(metric: str, now: datetime, above: float) -> list[Observation]:
    """The subjects of ``metric`` whose value is above ``above`` (the lowest threshold
    of its rules: nothing under it can breach any of them)."""
    if metric in ("gpu_temperature", "gpu_memory"):
        return _gpu_readings(metric, above)
    if metric == "gpu_xid":
        return _xid_events()
    if metric == "node_not_ready":
        return _nodes_not_ready(now)
    return _measured(metric)


def _gpu_readings(metric: str, above: float) -> list[Observation]:
    metrics = source()
    if metric == "gpu_temperature":
        return [
            Observation(gpu_subject(r.node_id, r.gpu), r.value, f"GPU {r.gpu}", r.node_id, r.gpu)
            for r in metrics.instant("temperature")
            if r.value > above
        ]
    free = {(r.node_id, r.gpu): r.value for r in metrics.instant("memory_free")}
    found = []
    for r in metrics.instant("memory_used"):
        if (r.node_id, r.gpu) not in free:
            # Without the free memory the GPU's size is unknown: counting it as none would
            # read a full GPU, as VictoriaMetrics' first moments after a new scrape answer.
            continue
        total = r.value + free[(r.node_id, r.gpu)]
        percent = round(100.0 * r.value / total, 2) if total > 0 else 0.0
        if percent > above:
            found.append(
                Observation(gpu_subject(r.node_id, r.gpu), percent, f"GPU {r.gpu}", r.node_id, r.gpu)
            )
    return found


def _xid_events() -> list[Observation]:
    return [
        Observation(
            f"{gpu_subject(node_id, gpu)}:xid:{code}",
            code,
            f"GPU {gpu} ({description})",
            str(node_id),
            gpu,
            severity=severity,
        )
        for node_id, gpu, code, severity, description in XidEvent.objects.filter(
            resolved_at__isnull=True
        ).values_list("node_id", "gpu", "code", "severity", "description")
    ]


def down_nodes(now: datetime) -> set[str]:
    """Enrolled nodes, not in maintenance, whose agent went silent."""
    cutoff = now - timedelta(seconds=settings.AGENT_OFFLINE_AFTER_SECONDS)
    return {
        str(pk)
        for pk in Node.objects.filter(enrolled_at__isnull=False, credential_hash__gt="")
        .exclude(state=Node.State.MAINTENANCE)
        .filter(Q(agent_offline=True) | Q(last_heartbeat_at__lt=cutoff) | Q(last_heartbeat_at__isnull=True))
        .values_list("pk", flat=True)
    }


def _nodes_not_ready(now: datetime) -> list[Observation]:
    return [Observation(f"node:{pk}", 1.0, "node", pk) for pk in sorted(down_nodes(now))]


def by_cluster(observations: list[Observation], tenant_of) -> list[Observation]:
    """The down nodes counted per cluster: the nodes one tenant holds, or the fleet's
    unallocated ones (``tenant_of(node_id)``: the holding tenant's pk or None)."""
    counts: dict[object, int] = {}
    for observation in observations:
        tenant = tenant_of(observation.node_id)
        counts[tenant] = counts.get(tenant, 0) + 1
    return [
        Observation(f"cluster:{tenant or 'fleet'}", float(count), "cluster", tenant_id=tenant)
        for tenant, count in counts.items()
    ]


def _measured(metric: str) -> list[Observation]:
    return [
        Observation(
            f"{metric}:{m.subject}",
            m.value,
            m.label or m.subject,
            m.node_id and str(m.node_id),
            None,
            m.tenant_id,
        )
        for m in Measurement.objects.filter(metric=metric)
    ]
