"""The ASGI entry: route traffic goes to the proxy before Django, the rest to Django.

Django's middleware would buffer bodies and add the portal's own headers, so
proxied requests never reach it. ``/_gpuaas/auth`` is where the nginx data plane asks
for its grants (``apps.proxy.authrequest``), ``/_gpuaas/session`` the ticket exchange.
"""

from __future__ import annotations

from apps.proxy import access, authrequest
from apps.proxy.dataplane import exchange, http, pages, websocket


class ProxyDispatcher:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            host = _host(scope)
            path = scope["path"]
            if access.is_proxied(host, path):
                if kind == "websocket":
                    return await websocket.handle(scope, receive, send, host)
                if path == "/_gpuaas/session":
                    return await exchange.handle(scope, receive, send, host)
                if path == "/_gpuaas/auth":
                    return await authrequest.handle(scope, receive, send)
                if path.startswith("/_gpuaas/"):
                    return await _not_found(send)
                return await http.handle(scope, receive, send, host)
        return await self.app(scope, receive, send)


def _host(scope) -> str:
    for name, value in scope["headers"]:
        if name == b"host":
            return value.decode("latin-1").lower()
    server = scope.get("server")
    return f"{server[0]}:{server[1]}" if server else ""


async def _not_found(send):
    start, body = pages.render(*pages.NOT_FOUND)
    await send(start)
    await send(body)
