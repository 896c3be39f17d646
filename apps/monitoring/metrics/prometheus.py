"""PromQL over a Prometheus-compatible HTTP API (VictoriaMetrics in production):
``/api/v1/query_range`` and ``/api/v1/query``, POSTed as forms so a tenant's
hundred node ids never make an over-long URL.

Series are selected by the ``node_id`` label the platform's own target file puts
on each agent it scrapes, and the caller clips them to its allocation records;
the tenant labels the target file also carries are for people querying the
database directly, not for attribution.

The ``node_id`` label is the target file's (the scraper keeps a target's labels over
the ones a scrape carries), but every other label is what the node's exporter
served, and a bare-metal tenant has root on its node (decision 0024). A series whose
``gpu`` is not a GPU index is passed over: read as a number it would stop the alert
round every tenant's alerts come from, or fail to fit an alert's row. So is a latest
reading that is not a finite number: an infinite one breaches every rule, and no JSON
answer carries the alert it would open.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

import httpx
import msgspec

from apps.core import outbound
from apps.core.errors import Unavailable
from apps.monitoring.metrics.base import MAX_GPUS_PER_NODE, METRICS, Reading, Series

TIMEOUT_SECONDS = 10.0
RETRY_AFTER_SECONDS = 5


class PrometheusSource:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def range(self, metrics: list[str], node_ids: list[str], start: int, end: int, step: int) -> list[Series]:
        if not node_ids:
            return []
        # One query a metric for all the nodes, all asked at once: the database works on
        # the next while this process decodes the one before.
        with ThreadPoolExecutor(max_workers=len(metrics)) as pool:
            answers = pool.map(lambda metric: self._range(metric, node_ids, start, end, step), metrics)
            found = [series for answer in answers for series in answer]
        found.sort(key=lambda s: (s.node_id, s.gpu))
        return found

    def _range(self, metric: str, node_ids: list[str], start: int, end: int, step: int) -> list[Series]:
        # Rounded by the database: three decimals, as the embedded store answers.
        query = f"round(avg_over_time({_selector(metric, node_ids)}[{step}s]), 0.001)"
        return [
            Series(
                result.metric.get("node_id", ""), gpu, result.metric.get("UUID", ""), metric, result.values
            )
            for result in self._query("query_range", _Matrix, query=query, start=start, end=end, step=step)
            if (gpu := _gpu(result.metric)) is not None
        ]

    def instant(self, metric: str, node_ids: list[str] | None = None) -> list[Reading]:
        query = f"last_over_time({_selector(metric, node_ids)}[5m])"
        return [
            Reading(
                r["metric"].get("node_id", ""),
                gpu,
                r["metric"].get("UUID", ""),
                metric,
                float(r["value"][0]),
                float(r["value"][1]),
            )
            for r in self._query("query", _Vector, query=query)
            if (gpu := _gpu(r["metric"])) is not None and math.isfinite(float(r["value"][1]))
        ]

    def _query(self, endpoint: str, data: type[_Matrix | _Vector], **form) -> list:
        try:
            # Uncompressed: inflating tens of MB would cost this process more than the
            # bytes cost the network.
            response = httpx.post(
                f"{self.url}/api/v1/{endpoint}",
                data=form,
                headers={"Accept-Encoding": "identity"},
                verify=outbound.tls(),
                timeout=TIMEOUT_SECONDS,
            )
            response.raise_for_status()
            # Decoded straight into typed points (the API's value strings become floats
            # in C): a tenant's day is millions of them.
            body = msgspec.json.decode(response.content, type=_Answer[data], strict=False)
        except (httpx.HTTPError, msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Unavailable(
                f"The metrics database does not answer ({type(exc).__name__}).",
                retry_after=RETRY_AFTER_SECONDS,
            ) from None
        if body.status != "success" or body.data is None:
            raise Unavailable("The metrics database refused the query.", retry_after=RETRY_AFTER_SECONDS)
        return body.data.result


# The HTTP API's answers (Prometheus' documentation, "Expression query result formats").
class _RangeSeries(msgspec.Struct):
    metric: dict[str, str]
    values: list[tuple[int, float]]


class _Matrix(msgspec.Struct):
    result: list[_RangeSeries]


class _Vector(msgspec.Struct):
    result: list[dict]


_Data = TypeVar("_Data", _Matrix, _Vector)


class _Answer(msgspec.Struct, Generic[_Data]):
    status: str
    data: _Data | None = None


def _gpu(labels: dict[str, str]) -> int | None:
    """The series' GPU index, or None when its ``gpu`` label is not one."""
    text = labels.get("gpu", "")
    if len(text) > 3 or not (text.isascii() and text.isdigit()) or int(text) >= MAX_GPUS_PER_NODE:
        return None
    return int(text)


def _selector(metric: str, node_ids: list[str] | None) -> str:
    name = METRICS[metric].name
    if node_ids is None:
        return name
    # Node ids are UUIDs: nothing in them needs escaping inside the regex.
    return f'{name}{{node_id=~"{"|".join(str(n) for n in node_ids)}"}}'
