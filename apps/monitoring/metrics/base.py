"""The metrics read interface and the metric names shared by both stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol


class Metric(NamedTuple):
    name: str  # the DCGM exporter's series name
    unit: str
    column: str  # the embedded store's column


# The platform's metric names (CONTRACT "Monitoring and alerts") and the DCGM series behind them.
METRICS: dict[str, Metric] = {
    "utilization": Metric("DCGM_FI_DEV_GPU_UTIL", "%", "utilization"),
    "memory_used": Metric("DCGM_FI_DEV_FB_USED", "MiB", "memory_used"),
    "memory_free": Metric("DCGM_FI_DEV_FB_FREE", "MiB", "memory_free"),
    "temperature": Metric("DCGM_FI_DEV_GPU_TEMP", "C", "temperature"),
    "power": Metric("DCGM_FI_DEV_POWER_USAGE", "W", "power"),
}
# A node's GPUs are numbered from 0 below this, whichever store or agent reports them.
MAX_GPUS_PER_NODE = 64


@dataclass(frozen=True)
class Reading:
    """A GPU's latest value of one metric."""

    node_id: str
    gpu: int
    uuid: str
    metric: str
    at: float
    value: float


@dataclass
class Series:
    """One GPU's values of one metric over time, ``points`` as ``(unix_seconds, value)``
    in time order (callers cut a span out of them by bisection)."""

    node_id: str
    gpu: int
    uuid: str
    metric: str
    points: list[tuple[int, float]] = field(default_factory=list)


class MetricsSource(Protocol):
    """What the API, the charts and an alert evaluator ask of a metrics store.

    Node ids select series by the platform's own node records; which tenant a
    GPU's values belong to is decided by the caller from allocation records,
    never from labels a scraper attached.
    """

    def range(self, metrics: list[str], node_ids: list[str], start: int, end: int, step: int) -> list[Series]:
        """Values at ``start``, ``start + step``, ... ``end`` (unix seconds, aligned to
        ``step``), each the mean of the readings in the step that ends there."""

    def instant(self, metric: str, node_ids: list[str] | None = None) -> list[Reading]:
        """Every GPU's latest value (of the last 5 minutes); all nodes when ``node_ids`` is None."""
