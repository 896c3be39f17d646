"""Prometheus metrics: request counters in process, domain gauges read at scrape time."""

from __future__ import annotations

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


class MetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        HTTP_LATENCY.observe(time.perf_counter() - started)
        HTTP_REQUESTS.labels(request.method, str(response.status_code)).inc()
        return response
