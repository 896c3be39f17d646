"""The portal's WebSockets accept one origin: the portal's own.

Channels' ``AllowedHostsOriginValidator`` accepted a socket from any origin whose
host is an allowed host, and the allowed hosts include the apps domain's (and,
on the embedded default, every ``*.localhost``): a tenant's app page could open
the portal's sockets with the viewer's session. Here the ``Origin`` must be the
platform's own (``GPUAAS_ISSUER``) or the origin the request itself was sent to
(its ``Host``, when that is an allowed host), and never a host under
``GPUAAS_APPS_DOMAIN``.

The proxy's path-prefix routes share the portal's origin, and judge an ``Origin``
by the same request origin (``same_origin``, decision 0077).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _normalised(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url.strip().lower())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port


def _in_apps_domain(hostname: str) -> bool:
    apps = (settings.APPS_DOMAIN or "").lower().strip(".")
    return bool(apps) and (hostname == apps or hostname.endswith("." + apps))


def scope_header(scope, name: bytes) -> str:
    """The value of header ``name`` (lower-case bytes) in an ASGI scope, or ""."""
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return ""


def own_origin(scope, host: str) -> tuple[str, str, int] | None:
    """The origin a request was sent to, ``scheme://Host``, when its Host is one the
    portal serves: an allowed host (Django's own check, which nothing in front of the
    sockets and the proxy applies) outside the apps domain. None for any other: a page
    on a host of the attacker's that resolves to the platform (DNS rebinding) sends its
    own name as both Host and Origin."""
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = "https" if settings.HTTPS or scope.get("scheme") in ("https", "wss") else "http"
    origin = _normalised(f"{scheme}://{host}")
    return None if origin is None or _in_apps_domain(origin[1]) else origin


def same_origin(origin: str, scope, host: str) -> bool:
    """Whether a browser's ``Origin`` is the request's own origin, as Django's CSRF
    check compares them (``own_origin``)."""
    own = own_origin(scope, host)
    return own is not None and _normalised(origin) == own


def portal_origins(scope) -> set[tuple[str, str, int]]:
    origins = {_normalised(settings.ISSUER), own_origin(scope, scope_header(scope, b"host"))}
    return {origin for origin in origins if origin and not _in_apps_domain(origin[1])}


async def _refuse(receive, send) -> None:
    # Closing before accepting answers the handshake with 403. Not Channels'
    # WebsocketDenier: a consumer first listens on the channel layer, two Redis
    # commands for a socket that is refused anyway.
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close"})


class PortalOriginValidator:
    """ASGI middleware for the portal's WebSocket routes (see the module docstring)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        origin = _normalised(scope_header(scope, b"origin"))
        if origin is not None and origin in portal_origins(scope):
            return await self.application(scope, receive, send)
        return await _refuse(receive, send)
