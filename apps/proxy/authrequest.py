"""``GET /_gpuaas/auth``: the decision nginx asks for before it moves a byte
(docker/nginx.conf and docker/nginx/gpuaas.lua, decisions 0016 and 0018).

nginx sends the browser request's host, raw URI and Origin in ``X-Original-*``
headers, with the route cookie. The answer is 204 with what nginx needs to proxy
the request itself: the upstream and its IP addresses, the route's prefixes, the
bridge header, the frame-ancestors, the secret to mask from pages, and the
connection limits with what they count (instance, user). Every value depends only
on the route, the cookie, the host and the Origin (a foreign one is refused; on a
path_prefix route the host, port included, says which origin is its own), never on
the rest of the URI, so nginx may keep it for a few seconds per cookie, host, route
and Origin. The portal says how long, in ``Cache-Control``: ``max-age`` for as long as an answer
holds, ``stale-while-revalidate`` for how much longer nginx may use it while it
asks again (decision 0017). Refusals are not kept, and remove the grant they answer.

nginx's side knows only 2xx, 401 and 403, so any refusal is 401 or 403 there.
For the page the browser sees, nginx asks again with ``X-Gpuaas-Auth-Page``
naming the status it has: 401 or 403 get the refusal with its real status (404,
503 with ``Retry-After``, ...); nginx's own 429, 502 and 504 get the proxy's page
for them. A route's own path without its slash is answered 308 to the route, which
nginx passes on, as the ASGI proxy redirects it.

The endpoint is nginx's alone: nginx marks the location ``internal``, and the
app wants ``GPUAAS_PROXY_AUTH_SECRET`` in ``X-Gpuaas-Auth-Secret``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import socket
from http.cookies import CookieError, SimpleCookie
from typing import NamedTuple
from urllib.parse import urlsplit

from cachetools import TTLCache
from django.conf import settings

from apps.proxy import access, sessions
from apps.proxy.access import Target
from apps.proxy.dataplane import pages
from apps.proxy.dataplane.respond import redirect

_NGINX_PAGES = {"429": pages.BUSY, "502": pages.BAD_GATEWAY, "504": pages.GATEWAY_TIMEOUT}
# Revocation reaches a request through nginx after 2 s, and never after more than 3 s.
_CACHE_FOR = ((b"cache-control", b"max-age=2, stale-while-revalidate=1"),)
# An app's host name -> its addresses as nginx's balancer takes them, for 30 s as
# nginx's resolver kept them (valid=30s).
_ADDRESSES: TTLCache[str, str] = TTLCache(maxsize=4096, ttl=30.0)


class Answer(NamedTuple):
    status: int
    spec: tuple = ()  # the page of a refusal (apps.proxy.dataplane.pages)
    message: str = ""
    grant: tuple = ()  # the 204's headers
    location: str = ""  # the 308's


async def handle(scope: dict, receive, send) -> None:
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    secret = settings.PROXY_AUTH_SECRET.encode()
    if not secret or not hmac.compare_digest(headers.get("x-gpuaas-auth-secret", "").encode(), secret):
        await _send(send, 403, [(b"content-type", b"text/plain")], b"Only the platform's nginx may ask.\n")
        return
    uri = headers.get("x-original-uri", "")
    target = await access.resolve(headers.get("x-original-host", ""), urlsplit(uri).path)
    answer = await _decide(target, uri, headers, scope)
    if answer.status == 308:
        await redirect(send, 308, answer.location)
    elif "x-gpuaas-auth-page" in headers:
        nginx_page = _NGINX_PAGES.get(headers["x-gpuaas-auth-page"])
        if answer.status == 204 and nginx_page:
            answer = Answer(nginx_page[0], nginx_page)
        await _page(send, target, answer, uri, not pages.wants_html(headers.get("x-original-accept", "")))
    elif answer.status == 204:
        await _send(send, 204, answer.grant + _CACHE_FOR, b"")
    else:
        # nginx takes only 401 and 403; the page request tells the browser the rest.
        await _send(send, 401 if answer.status == 401 else 403, [], b"")


async def _decide(target: Target | None, uri: str, headers: dict, scope: dict) -> Answer:
    path, query = urlsplit(uri)[2:4]
    if target is None:
        return Answer(404, pages.NOT_FOUND)
    if target.outside(path):
        location = target.slash_location(path, query)
        return Answer(308, location=location) if location else Answer(404, pages.NOT_FOUND)
    websocket = bool(headers.get("x-original-upgrade"))
    if target.foreign(headers.get("x-original-origin"), scope, headers.get("x-original-host", "")):
        return Answer(403, pages.DENIED, pages.FROM_ANOTHER_SITE["websocket" if websocket else "http"])
    cookie = _route_cookie(headers.get("cookie", ""))
    decision, target = await access.authorize(target, cookie, "websocket" if websocket else "http")
    if not decision.allowed:
        return Answer(decision.status, pages.NO_SESSION if decision.status == 401 else pages.DENIED)
    if target.state == "pending":
        return Answer(503, pages.STARTING)
    if reason := access.unavailable(target, decision):
        return Answer(503, pages.UNAVAILABLE, reason)
    bridge = ""
    for name, value in target.bridge_headers:
        if name.lower() != "authorization":
            # nginx names the headers it sets in its configuration; the seed's one bridge mode is this one.
            return Answer(502, pages.BAD_GATEWAY, "This app's sign-in header is not one nginx can send.")
        bridge = value
    try:
        addresses = await upstream_addresses(target.upstream[0])
    except OSError:
        return Answer(502, pages.BAD_GATEWAY, "The app's address cannot be resolved.")
    await access.touch(target)
    grant = _grant(target, decision.user_id, bridge, addresses)
    return Answer(204, grant=tuple((name.encode(), value.encode()) for name, value in grant))


async def upstream_addresses(host: str) -> str:
    """The upstream's IP addresses, space-separated, an IPv6 one in brackets: nginx's
    balancer connects to addresses, not names. Names are resolved off the event loop
    and kept for a while; one that does not resolve raises ``OSError``."""
    try:
        return _bracketed(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    kept = _ADDRESSES.get(host)
    if kept is not None:
        return kept
    infos = await asyncio.get_running_loop().run_in_executor(
        None, socket.getaddrinfo, host, None, 0, socket.SOCK_STREAM
    )
    addresses = _ADDRESSES[host] = " ".join(dict.fromkeys(_bracketed(info[4][0]) for info in infos))
    return addresses


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# The grant nginx proxies with (the 204's headers), in the order docker/nginx/gpuaas.lua
# stores them (its HEADERS): the first five become its $g_* variables. One definition,
# which tests/proxy/test_grant_contract.py holds gpuaas.lua to.
GRANT_HEADERS = (
    "x-gpuaas-upstream",
    "x-gpuaas-public-prefix",
    "x-gpuaas-rewrite-from",
    "x-gpuaas-forwarded-prefix",
    "x-gpuaas-frame-ancestors",
    "x-gpuaas-upstream-prefix",
    "x-gpuaas-authorization",
    "x-gpuaas-passthrough",
    "x-gpuaas-upstream-addr",
    "x-gpuaas-instance",
    "x-gpuaas-instance-limit",
    "x-gpuaas-user",
    "x-gpuaas-user-limit",
    "x-gpuaas-redact",
)


def _grant(target: Target, user_id, bridge: str, addresses: str) -> list[tuple[str, str]]:
    # A route keeps the limits it was planned with; a hard limit lowered since still caps them.
    per_instance = min(target.limit_per_instance, settings.PROXY_MAX_CONNECTIONS_PER_INSTANCE)
    per_user = min(target.limit_per_user, settings.PROXY_MAX_CONNECTIONS_PER_USER)
    host, port = target.upstream
    path_mode = target.mode == "path_prefix"
    values = {
        "x-gpuaas-upstream": f"{_bracketed(host)}:{port}",
        "x-gpuaas-public-prefix": target.public_prefix,
        # Redirects and cookie paths the app emits under this prefix move under the
        # public one (only a path_prefix route on an app that does not know its base
        # path changes anything: "/" becomes "/w/{iid}/{ep}/").
        "x-gpuaas-rewrite-from": target.upstream_prefix if path_mode else "/",
        "x-gpuaas-forwarded-prefix": target.public_prefix.rstrip("/"),
        "x-gpuaas-frame-ancestors": target.frame_ancestors,
        "x-gpuaas-upstream-prefix": target.upstream_prefix,
        "x-gpuaas-authorization": bridge,
        "x-gpuaas-passthrough": "1" if target.auth == "bearer_passthrough" else "",
        "x-gpuaas-upstream-addr": addresses,
        "x-gpuaas-instance": target.instance_id,
        "x-gpuaas-instance-limit": str(per_instance),
        "x-gpuaas-user": str(user_id),
        "x-gpuaas-user-limit": str(per_user),
        "x-gpuaas-redact": target.redact[0].decode() if target.redact else "",
    }
    return [(name, values[name]) for name in GRANT_HEADERS]


def _route_cookie(header: str) -> str | None:
    try:
        morsel = SimpleCookie(header).get(sessions.COOKIE)
    except CookieError:
        return None
    return morsel.value if morsel else None


async def _page(send, target: Target | None, answer: Answer, uri: str, as_json: bool) -> None:
    if answer.status == 204:
        # Allowed since nginx asked a moment ago (a session just made, an app just started): again.
        await _send(send, 307, [(b"location", uri.encode("latin-1")), (b"cache-control", b"no-store")], b"")
        return
    _, code, title, message = answer.spec
    start, body = pages.render(
        answer.status,
        code,
        title,
        answer.message or message,
        portal_url=target.portal_url if target else settings.ISSUER + "/",
        as_json=as_json,
        frame_ancestors=target.frame_ancestors if target else "'none'",
        refresh=5 if answer.spec is pages.STARTING else 0,
    )
    await send(start)
    await send(body)


async def _send(send, status: int, headers, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})
