"""What the proxy counts for ``/metrics`` (per process, like the portal's own counters)."""

from prometheus_client import Counter, Gauge

from apps.core.metrics import REGISTRY

REQUESTS = Counter(
    "gpuaas_proxy_requests_total",
    "Requests and WebSocket handshakes through the platform proxy, by outcome",
    ["kind", "status"],
    registry=REGISTRY,
)
OPEN_WEBSOCKETS = Gauge(
    "gpuaas_proxy_open_websockets", "WebSockets relayed by this process right now", registry=REGISTRY
)


def count(kind: str, status: int) -> None:
    # Status classes, not codes: a label per code and route would explode the series.
    REQUESTS.labels(kind, f"{status // 100}xx" if status else "aborted").inc()
