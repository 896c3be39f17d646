"""Header rules between browser and app (CONTRACT.md "Platform proxy").

Upstream: hop-by-hop headers, the platform's credentials (its cookies, the
browser's ``Authorization``) and client-sent ``X-Forwarded-*`` never reach the
app; the app gets fresh forwarding headers, the route's bridge header and its
own origin as ``Origin``. Downstream: redirects and cookies are kept on the
route, framing is governed by the route's ``frame-ancestors``, and no header
carrying a redacted secret, or reaching past the route (service workers, site
data), reaches the browser.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit, urlunsplit

from django.conf import settings

from apps.proxy import sessions
from apps.proxy.access import Target
from apps.proxy.dataplane import ranges

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Set by the proxy itself, or meaningless upstream: host and the forwarding
# headers are set afresh, Expect is answered by the ASGI server, and a
# WebSocket handshake is made anew by the WebSocket client.
_REPLACED = frozenset(
    {
        b"host",
        b"origin",
        b"forwarded",
        b"x-real-ip",
        b"expect",
        b"cookie",
        b"content-length",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)
_DROPPED = HOP_BY_HOP | _REPLACED
# Read by the proxy (Inbound._read); of these only the app's cookies and Accept go on.
_READ = frozenset({b"cookie", b"origin", b"accept", b"content-length", b"transfer-encoding"})
# Dropped on a route with a secret to mask, which must see bodies unencoded, and
# whole or in the widened part it asked for (ranges.py): script on the route can ask
# for any range it likes. If-Range goes along with a widened Range.
_UNENCODED = frozenset({b"accept-encoding"})
_UNENCODED_WHOLE = frozenset({b"accept-encoding", b"if-range"})
# What would reach past the route on the portal's origin: a service worker's scope
# widened to the whole origin, the portal's cookies and storage cleared.
_BEYOND_THE_ROUTE = frozenset({b"service-worker-allowed", b"clear-site-data"})
_ROUTE_COOKIE = sessions.COOKIE.encode()
# A dot segment as browsers read it ("%2e" is a dot too), to resolve before confining.
_ENCODED_DOT = re.compile("%2e", re.I)


def platform_cookies() -> frozenset[str]:
    return frozenset({settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME, sessions.COOKIE})


class Inbound:
    """What the proxy needs from a browser request, read in one pass over its headers."""

    __slots__ = (
        "accept",
        "asked",
        "chunked",
        "headers",
        "host",
        "length",
        "origin",
        "route_cookie",
        "secure",
        "service_worker",
        "subprotocols",
    )

    def __init__(self, scope: dict, target: Target | None, host: str):
        self.host = host
        self.route_cookie: str | None = None
        self.origin: str | None = None
        self.accept = b""
        self.length: bytes | None = None
        self.chunked = False
        # A service worker's script is being fetched (the browser says so): refused.
        self.service_worker = False
        # On a route with a secret, the browser's Range is asked for widened (ranges.py).
        self.asked: ranges.Asked | None = None
        self.subprotocols: list[str] = scope.get("subprotocols") or []
        proto_header = _trusted_proto_header()
        forwarded_proto, self.headers = self._sort(scope["headers"], target, proto_header)
        self.secure = scope.get("scheme") in ("https", "wss") or (
            bool(proto_header) and forwarded_proto == settings.SECURE_PROXY_SSL_HEADER[1].encode()
        )

    def _sort(
        self, raw: list[tuple[bytes, bytes]], target: Target | None, proto_header: bytes
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """Read what the proxy needs from the browser's headers: the trusted forwarded
        proto, and the headers that go on to the app."""
        forwarded_proto = b""
        own = _browser_may_not_send(target)
        connection_named: set[bytes] = set()
        kept: list[tuple[bytes, bytes]] = []
        for name, value in raw:
            if name in _READ:
                if passed := self._read(name, value):
                    kept.append((name, passed))
            elif name == b"connection":
                connection_named.update(v.strip().lower() for v in value.split(b","))
            elif proto_header and name == proto_header:
                forwarded_proto = value
            elif name == b"range" and target is not None and target.redact:
                self.asked = ranges.asked(value)
            elif name == b"service-worker":
                self.service_worker = True
            elif name in _DROPPED or name in own or name.startswith(b"x-forwarded-"):
                continue
            else:
                kept.append((name, value))
        if connection_named:
            kept = [(n, v) for n, v in kept if n not in connection_named]
        return forwarded_proto, kept

    def _read(self, name: bytes, value: bytes) -> bytes | None:
        """Note what the proxy needs from one of the headers in ``_READ``; what of it goes
        on to the app, if anything."""
        if name == b"cookie":
            return self._cookies(value) or None
        if name == b"accept":
            self.accept = value
            return value
        if name == b"origin":
            self.origin = value.decode("latin-1")
        elif name == b"content-length":
            self.length = value
        else:  # transfer-encoding
            self.chunked = b"chunked" in value.lower()
        return None

    def _cookies(self, value: bytes) -> bytes:
        """The app's own cookies; the platform's are taken out (the route cookie is remembered)."""
        platform = _platform_cookie_bytes()
        kept = []
        for part in value.split(b";"):
            name, _, cookie_value = part.strip().partition(b"=")
            if name in platform:
                if name == _ROUTE_COOKIE and self.route_cookie is None:
                    self.route_cookie = cookie_value.decode("latin-1")
                continue
            if name:
                kept.append(part.strip())
        return b"; ".join(kept)


def _browser_may_not_send(target: Target | None) -> set[bytes]:
    """The browser's Authorization is the platform's (unless the app takes it as is);
    a header the bridge sets must not come from the browser."""
    own = {name.lower().encode() for name, _ in target.bridge_headers} if target else set()
    if target is None or target.auth != "bearer_passthrough":
        own.add(b"authorization")
    return own


def _trusted_proto_header() -> bytes:
    """The header named by SECURE_PROXY_SSL_HEADER (``HTTP_X_FORWARDED_PROTO``), as a wire name."""
    configured = settings.SECURE_PROXY_SSL_HEADER
    if not configured:
        return b""
    return configured[0].removeprefix("HTTP_").replace("_", "-").lower().encode()


_cookie_names: dict[frozenset, frozenset[bytes]] = {}


def _platform_cookie_bytes() -> frozenset[bytes]:
    names = platform_cookies()
    found = _cookie_names.get(names)
    if found is None:
        found = _cookie_names[names] = frozenset(n.encode() for n in names)
    return found


def upstream_origin(target: Target) -> str:
    host, port = target.upstream
    return f"http://{host}:{port}"


def forwarding(inbound: Inbound, scope: dict, target: Target) -> list[tuple[bytes, bytes]]:
    """The forwarding headers, the bridge and the app's own origin, set afresh."""
    client = scope.get("client")
    added = [
        (b"x-forwarded-for", (client[0] if client else "").encode()),
        (b"x-forwarded-proto", b"https" if inbound.secure else b"http"),
        (b"x-forwarded-host", inbound.host.encode("latin-1")),
    ]
    prefix = target.public_prefix.rstrip("/")
    if prefix:
        added.append((b"x-forwarded-prefix", prefix.encode()))
    added.extend((name.encode(), value.encode()) for name, value in target.bridge_headers)
    if inbound.origin is not None:
        # JupyterLab (Tornado) compares Origin with Host, which is the upstream's.
        added.append((b"origin", upstream_origin(target).encode()))
    if target.redact:
        added.append((b"accept-encoding", b"identity"))
        if inbound.asked is not None:
            margin = max(len(secret) for secret in target.redact) - 1
            added.append((b"range", inbound.asked.widened(margin)))
    return added


def request_head(method: str, path: bytes, inbound: Inbound, scope: dict, target: Target) -> bytes:
    host, port = target.upstream
    lines = [b"%s %s HTTP/1.1\r\nhost: %s:%d\r\n" % (method.encode(), path, host.encode(), port)]
    dropped = _UNENCODED if inbound.asked is not None else _UNENCODED_WHOLE
    for name, value in inbound.headers:
        if target.redact and name in dropped:
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    for name, value in forwarding(inbound, scope, target):
        lines.append(b"%s: %s\r\n" % (name, value))
    if inbound.length is not None:
        lines.append(b"content-length: %s\r\n" % inbound.length)
    elif inbound.chunked:
        lines.append(b"transfer-encoding: chunked\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def response_headers(
    raw: list[tuple[bytes, bytes]], target: Target, request_path: str
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The app's response headers as the browser gets them, and the body's content
    coding (empty for identity).
    ``request_path``: the path the app was asked for, which a relative redirect is from."""
    connection_named = {
        token.strip() for name, value in raw if name == b"connection" for token in value.lower().split(b",")
    }
    out: list[tuple[bytes, bytes]] = []
    csp_seen = False
    encoding = b""
    # One search over all the values first: the secret is almost never in a header.
    redact = _present_secrets(raw, target.redact)
    for name, value in raw:
        if name in HOP_BY_HOP or name in connection_named or name in _BEYOND_THE_ROUTE:
            continue
        if redact and any(secret in value for secret in redact):
            continue
        if name == b"location":
            value = rewrite_location(value.decode("latin-1"), target, request_path).encode("latin-1")
        elif name == b"set-cookie":
            rewritten = rewrite_cookie(value.decode("latin-1"), target)
            if rewritten is None:
                continue
            value = rewritten.encode("latin-1")
        elif name == b"content-security-policy":
            csp_seen = True
            value = with_frame_ancestors(value.decode("latin-1"), target.frame_ancestors).encode("latin-1")
        elif name == b"x-frame-options":
            continue
        elif name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            encoding = value.strip().lower()  # one coding is enough: a browser applies them all
        out.append((name, value))
    out.extend(_framing(target, csp_seen))
    return out, encoding


def _present_secrets(raw: list[tuple[bytes, bytes]], redact: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The secrets found in any of the headers' values."""
    if not redact:
        return redact
    values = b"\0".join(value for _, value in raw)
    return tuple(secret for secret in redact if secret in values)


def _framing(target: Target, csp_seen: bool) -> list[tuple[bytes, bytes]]:
    """The route's framing policy, where the app's own policy did not carry it."""
    added = []
    if not csp_seen:
        added.append((b"content-security-policy", b"frame-ancestors " + target.frame_ancestors.encode()))
    if target.frame_ancestors == "'none'":
        added.append((b"x-frame-options", b"DENY"))
    return added


def rewrite_location(value: str, target: Target, request_path: str) -> str:
    """Where an app's redirect may send the browser (decision 0033): a place on the
    route, however the app writes it (its own upstream address and paths it serves
    at its root become the route's), or another site over https (an identity
    provider). Anything else, and anything a browser could read otherwise than this
    parser (``//host``, backslashes, control characters, ``%2e%2e``), leads to the
    route's root instead."""
    root = target.public_prefix
    if value.startswith("//") or any(char <= " " or char in "\\\x7f" for char in value):
        return root
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:  # an unreadable port
        return root
    scheme = parts.scheme.lower()
    if not scheme:
        return _on_route(urljoin(request_path, value), target, upstream=True)
    hostname = (parts.hostname or "").rstrip(".")
    if not hostname or parts.username is not None:
        return root
    where = (scheme, hostname, port or (443 if scheme == "https" else 80))
    rest = urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment))
    upstream_host, upstream_port = target.upstream
    if where == ("http", upstream_host, upstream_port):
        return _on_route(urljoin(request_path, rest), target, upstream=True)
    route = urlsplit(target.origin)
    if (hostname, port) == (route.hostname, route.port):
        # The route's own host, on whichever scheme the app believes it is served
        # (behind TLS it may not know).
        return _on_route(rest, target, upstream=False)
    if scheme == "https" and not _platform_host(hostname, route.hostname):
        return value
    return root


def _on_route(resolved: str, target: Target, *, upstream: bool) -> str:
    """``resolved`` (a path, query and fragment), on the route, or the route's root."""
    parts = urlsplit(resolved)
    path = urljoin("/", _ENCODED_DOT.sub(".", parts.path))  # dot segments removed
    if upstream:
        path = target.public_path(path)
    prefix = target.public_prefix
    if path.startswith("//") or not (path.startswith(prefix) or path == prefix.rstrip("/")):
        return prefix
    return urlunsplit(("", "", path, parts.query, parts.fragment))


def _platform_host(hostname: str, route_host: str | None) -> bool:
    """The portal's host, or an app's (another route is not an identity provider)."""
    domain = settings.APPS_DOMAIN
    return hostname in (urlsplit(settings.ISSUER).hostname, route_host) or bool(
        domain and (hostname == domain or hostname.endswith("." + domain))
    )


def rewrite_cookie(value: str, target: Target) -> str | None:
    """An app's cookie, host-only and scoped to the route; the platform's cookie names are refused
    (an app must not set or shadow the portal's session)."""
    first, *attributes = value.split(";")
    name = first.split("=", 1)[0].strip()
    if name in platform_cookies():
        return None
    kept, path = [first.strip()], ""
    for attribute in attributes:
        key, _, attr_value = attribute.strip().partition("=")
        key = key.strip().lower()
        if key == "domain":
            continue
        if key == "path":
            path = attr_value.strip()
            continue
        if attribute.strip():
            kept.append(attribute.strip())
    public = target.public_path(path) if path.startswith("/") else target.public_prefix
    prefix = target.public_prefix
    if not (public.startswith(prefix) or public == prefix.rstrip("/")):
        public = prefix  # never wider than the route (path_prefix routes share the portal's origin)
    kept.append(f"Path={public}")
    return "; ".join(kept)


def with_frame_ancestors(policy: str, frame_ancestors: str) -> str:
    directives = [
        directive.strip()
        for directive in policy.split(";")
        if directive.strip() and directive.split(None, 1)[0].lower() != "frame-ancestors"
    ]
    directives.append(f"frame-ancestors {frame_ancestors}")
    return "; ".join(directives)
