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


_counters: dict[tuple[str, int], object] = {}


def count(kind: str, status: int) -> None:
    counter = _counters.get((kind, status))
    if counter is None:
        # Status classes, not codes: a label per code and route would explode the series.
        label = f"{status // 100}xx" if status else "aborted"
        counter = _counters[kind, status] = REQUESTS.labels(kind, label)
    counter.inc()
