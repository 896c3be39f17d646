"""PromQL over a Prometheus-compatible HTTP API (VictoriaMetrics in production):
``/api/v1/query_range`` and ``/api/v1/query``, POSTed as forms so a tenant's
hundred node ids never make an over-long URL.

Series are selected by the ``node_id`` label the platform's own target file puts
on each agent it scrapes, and the caller clips them to its allocation records;
the tenant labels the target file also carries are for people querying the
database directly, not for attribution.
"""

from __future__ import annotations

import httpx

from apps.core.errors import Unavailable
from apps.monitoring.metrics.base import METRICS, Reading, Series

TIMEOUT_SECONDS = 10.0
RETRY_AFTER_SECONDS = 5


class PrometheusSource:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def range(self, metrics: list[str], node_ids: list[str], start: int, end: int, step: int) -> list[Series]:
        if not node_ids:
            return []
        found: list[Series] = []
        for metric in metrics:
            query = f"avg_over_time({_selector(metric, node_ids)}[{step}s])"
            for result in self._query("query_range", query=query, start=start, end=end, step=step):
                labels = result["metric"]
                points = [[int(float(t)), round(float(v), 3)] for t, v in result["values"]]
                found.append(
                    Series(
                        labels.get("node_id", ""), int(labels["gpu"]), labels.get("UUID", ""), metric, points
                    )
                )
        found.sort(key=lambda s: (s.node_id, s.gpu))
        return found

    def instant(self, metric: str, node_ids: list[str] | None = None) -> list[Reading]:
        query = f"last_over_time({_selector(metric, node_ids)}[5m])"
        return [
            Reading(
                r["metric"].get("node_id", ""),
                int(r["metric"]["gpu"]),
                r["metric"].get("UUID", ""),
                metric,
                float(r["value"][0]),
                float(r["value"][1]),
            )
            for r in self._query("query", query=query)
            if "gpu" in r["metric"]
        ]

    def _query(self, endpoint: str, **form) -> list[dict]:
        try:
            response = httpx.post(f"{self.url}/api/v1/{endpoint}", data=form, timeout=TIMEOUT_SECONDS)
            response.raise_for_status()
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise Unavailable(
                f"The metrics database does not answer ({type(exc).__name__}).",
                retry_after=RETRY_AFTER_SECONDS,
            ) from None
        if body.get("status") != "success":
            raise Unavailable("The metrics database refused the query.", retry_after=RETRY_AFTER_SECONDS)
        return body["data"]["result"]


def _selector(metric: str, node_ids: list[str] | None) -> str:
    name = METRICS[metric].name
    if node_ids is None:
        return name
    # Node ids are UUIDs: nothing in them needs escaping inside the regex.
    return f'{name}{{node_id=~"{"|".join(str(n) for n in node_ids)}"}}'
