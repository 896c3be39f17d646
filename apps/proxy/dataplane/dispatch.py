"""The ASGI entry: route traffic goes to the proxy before Django, the rest to Django.

Django's middleware would buffer bodies and add the portal's own headers, so
proxied requests never reach it. ``/_gpuaas/auth`` is where the nginx data plane asks
for its grants (``apps.proxy.authrequest``), ``/_gpuaas/session`` the ticket exchange.
"""

from __future__ import annotations

from apps.core import correlation
from apps.proxy import access, authrequest
from apps.proxy.dataplane import exchange, http, pages, websocket

_CORRELATION_HEADER = correlation.HEADER.lower().encode()


class ProxyDispatcher:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            host, given_id = _host_and_correlation_id(scope)
            path = scope["path"]
            if access.is_proxied(host, path):
                # As Django's middleware does for the portal: the access log line, the
                # audit records and the proxy's own error answers carry the same id.
                token = correlation.set(correlation.accept(given_id))
                try:
                    return await _proxied(kind, scope, receive, send, host, path)
                finally:
                    correlation.reset(token)
        return await self.app(scope, receive, send)


async def _proxied(kind: str, scope, receive, send, host: str, path: str):
    if kind == "websocket":
        return await websocket.handle(scope, receive, send, host)
    if path == "/_gpuaas/session":
        return await exchange.handle(scope, receive, send, host)
    if path == "/_gpuaas/auth":
        return await authrequest.handle(scope, receive, send)
    if path.startswith("/_gpuaas/"):
        return await _not_found(send)
    return await http.handle(scope, receive, send, host)


def _host_and_correlation_id(scope) -> tuple[str, str | None]:
    host = given_id = None
    for name, value in scope["headers"]:
        if name == b"host":
            host = value.decode("latin-1").lower()
        elif name == _CORRELATION_HEADER:
            given_id = value.decode("latin-1")
    if host is None:
        server = scope.get("server")
        host = f"{server[0]}:{server[1]}" if server else ""
    return host, given_id


async def _not_found(send):
    start, body = pages.render(*pages.NOT_FOUND)
    await send(start)
    await send(body)
