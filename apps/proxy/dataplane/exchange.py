"""``POST /_gpuaas/session``: a launcher's single-use ticket becomes the route cookie.

It answers on the portal's host (path_prefix routes) and on every route host
(subdomain routes); the ticket itself says which route it is for, and
``access.exchange`` refuses it on any other host.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

from django.conf import settings

from apps.core.errors import Unauthenticated
from apps.proxy import access, sessions
from apps.proxy.dataplane import pages
from apps.proxy.dataplane.headers import Inbound
from apps.proxy.dataplane.respond import access_line, page, redirect

_MAX_FORM_BYTES = 8192


async def handle(scope: dict, receive, send, host: str) -> None:
    started = time.monotonic()
    status = await _exchange(scope, receive, send, host)
    access_line(scope, status, None, None, 0, time.monotonic() - started)


async def _exchange(scope, receive, send, host: str) -> int:
    inbound = Inbound(scope, None, host)
    portal = settings.ISSUER + "/"
    if scope["method"] != "POST":
        return await page(
            send, inbound, pages.METHOD_NOT_ALLOWED, portal_url=portal, extra=((b"allow", b"POST"),)
        )
    if inbound.origin is not None and not _trusted_origin(inbound.origin, host):
        # Login CSRF: another site must not plant its own app session in this browser.
        return await page(
            send, inbound, pages.DENIED, portal_url=portal, message="This app link came from elsewhere."
        )
    body = await _read_form(receive)
    if body is None:
        return await page(send, inbound, pages.TOO_LARGE, portal_url=portal)
    form = parse_qs(body.decode("latin-1"))
    try:
        exchanged = await access.exchange(form.get("ticket", [""])[0], host)
    except Unauthenticated as exc:
        return await page(send, inbound, pages.NO_SESSION, portal_url=portal, message=exc.message)
    target = form.get("next", [""])[0]
    if not _local_path(target):
        target = exchanged.entry_path
    cookie = (
        f"{sessions.COOKIE}={exchanged.cookie}; Path={exchanged.cookie_path}; Max-Age={exchanged.max_age}; "
        "HttpOnly; SameSite=Lax"
    )
    if inbound.secure:
        cookie += "; Secure"
    return await redirect(send, 303, target, ((b"set-cookie", cookie.encode("latin-1")),))


def _trusted_origin(origin: str, host: str) -> bool:
    """The portal (whose launcher posts the ticket) or the route's own origin."""
    netloc = urlsplit(origin).netloc
    return bool(netloc) and netloc in (host, urlsplit(settings.ISSUER).netloc)


def _local_path(path: str) -> bool:
    """A path on this origin: never another host (``//evil``, ``/\\evil``) or a header break."""
    return (
        path.startswith("/")
        and not path.startswith("//")
        and "\\" not in path
        and all(" " < char < "\x7f" for char in path)
    )


async def _read_form(receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
