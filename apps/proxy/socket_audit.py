"""The audit trail of WebSockets through the platform proxy (seed 002, "WebSocket
Contract": audit visibility for connect and disconnect).

Two records per socket, never one per message: ``proxy.websocket.connect`` once the
app and the browser have both accepted it, ``proxy.websocket.disconnect`` when it
ends, with when it opened and closed, how long it lasted, the messages and bytes
each way and who closed it. Both carry the connection's correlation id. nginx hands
WebSockets to this proxy (docker/nginx/portal.conf, ``@gpuaas_websocket``), so both
data planes' sockets are recorded here.

The data plane writes them off the event loop and waits for its own writes within
the connection's lifetime, while the connection is counted against the route's
limits: the writes in flight never outnumber the sockets the limits let open, and
a burst of connects is paced by the database instead of queueing without bound.
"""

from __future__ import annotations

from types import SimpleNamespace

from apps.core import audit
from apps.proxy.models import ProxyRoute

CONNECT = "proxy.websocket.connect"
DISCONNECT = "proxy.websocket.disconnect"


def record(action: str, route_id: str, username: str, source_ip: str | None, details: dict) -> None:
    route = (
        ProxyRoute.objects.select_related("instance")
        .only("endpoint_name", "instance__id", "instance__tenant_id", "instance__project_id")
        .filter(pk=route_id)
        .first()
    )
    instance = route.instance if route is not None else None
    audit.record(
        SimpleNamespace(
            audit_actor=username or "anonymous", audit_actor_type="user" if username else "anonymous"
        ),
        action,
        target=instance,
        source_ip=source_ip,
        details={"route": route_id, "endpoint": route.endpoint_name if route else "", **details},
    )
