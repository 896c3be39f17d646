"""Prometheus metrics: request counters in process, domain gauges read at scrape time.

The middleware also writes the access log: one JSON line per request (uvicorn's
own access log is off), carrying the request's correlation id like every other
line. Probe and scrape paths log at DEBUG so they do not drown the rest.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

REGISTRY = CollectorRegistry(auto_describe=True)
HTTP_REQUESTS = Counter(
    "gpuaas_http_requests_total", "HTTP requests served", ["method", "status"], registry=REGISTRY
)
HTTP_LATENCY = Histogram(
    "gpuaas_http_request_duration_seconds",
    "Time to produce the response head",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)

_gauge_sources: list = []


def register_gauge(name: str, documentation: str, labels: list[str], read) -> None:
    """``read()`` returns ``[(label_values, value), ...]`` at scrape time."""
    _gauge_sources.append((name, documentation, labels, read))


class _DomainCollector:
    def collect(self):
        for name, documentation, labels, read in _gauge_sources:
            family = GaugeMetricFamily(name, documentation, labels=labels)
            for label_values, value in read():
                family.add_metric(label_values, value)
            yield family


REGISTRY.register(_DomainCollector())


def exposition() -> bytes:
    return generate_latest(REGISTRY)


access_logger = logging.getLogger("gpuaas.access")
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class MetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        HTTP_LATENCY.observe(elapsed)
        HTTP_REQUESTS.labels(request.method, str(response.status_code)).inc()
        level = logging.DEBUG if request.path in _QUIET_PATHS else logging.INFO
        if access_logger.isEnabledFor(level):
            # The path only: query strings may carry tickets or search terms.
            access_logger.log(
                level,
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
        return response
