"""Proxying one HTTP request: authorize, then stream the request body up and the
response down, rewriting headers and redacting secrets on the way."""

from __future__ import annotations

import asyncio
import time

from apps.proxy import access
from apps.proxy.dataplane import headers, limits, pages, ranges, upstream
from apps.proxy.dataplane.redact import Redactor
from apps.proxy.dataplane.respond import access_line, page, redirect

_NO_SERVICE_WORKERS = "Apps cannot install service workers."
_HEAD_TOO_LARGE = "The app answered with too many headers, or too large ones."


class _BrowserGone(Exception):
    pass


async def handle(scope: dict, receive, send, host: str) -> None:
    started = time.monotonic()
    target = await access.resolve(host, scope["path"])
    inbound = headers.Inbound(scope, target, host)
    status, user_id, sent = 0, None, 0
    try:
        if target is None:
            status = await page(send, inbound, pages.NOT_FOUND)
            return
        if inbound.service_worker:
            # A worker registered on a route (on path_prefix routes, the portal's origin)
            # would outlive the app and the session, and answer in the portal's place.
            status = await page(send, inbound, pages.DENIED, target, message=_NO_SERVICE_WORKERS)
            return
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if target.outside(raw_path):
            if location := target.slash_location(raw_path, scope["query_string"].decode("latin-1")):
                status = await redirect(send, 308, location)
            else:
                status = await page(send, inbound, pages.NOT_FOUND, target)
            return
        if target.foreign(inbound.origin, scope, host):
            status = await page(send, inbound, pages.DENIED, target, message=pages.FROM_ANOTHER_SITE["http"])
            return
        decision, count, target = await access.admit(target, inbound.route_cookie, "http")
        user_id = decision.user_id
        try:
            if not decision.allowed and decision.status == 503:
                status = await page(send, inbound, pages.UNCHECKED, target)
            elif not decision.allowed:
                spec = pages.NO_SESSION if decision.status == 401 else pages.DENIED
                status = await page(send, inbound, spec, target)
            elif target.state == "pending":
                status = await page(send, inbound, pages.STARTING, target, refresh=5)
            elif reason := access.unavailable(target, decision):
                status = await page(send, inbound, pages.UNAVAILABLE, target, message=reason)
            elif count is None:
                status = await page(send, inbound, pages.BUSY, target)
            else:
                await access.touch(target)
                status, sent = await _forward(scope, receive, send, target, inbound, raw_path)
        finally:
            if count is not None:
                limits.release(count)
    finally:
        access_line(scope, status, target, user_id, sent, time.monotonic() - started)


async def _forward(scope, receive, send, target, inbound, raw_path: str) -> tuple[int, int]:
    method = scope["method"]
    upstream_path = target.upstream_path(raw_path)
    path = upstream_path.encode("latin-1")
    if scope["query_string"]:
        path += b"?" + scope["query_string"]
    head = headers.request_head(method, path, inbound, scope, target)
    has_body = inbound.length is not None or inbound.chunked
    pool = upstream.pool()
    while True:
        try:
            conn = await pool.connect(target.upstream)
        except upstream.UpstreamError as exc:
            spec = pages.GATEWAY_TIMEOUT if exc.status == 504 else pages.BAD_GATEWAY
            return await page(send, inbound, spec, target), 0
        try:
            conn.send(head)
            if has_body:
                await _send_body(conn, receive, inbound.chunked)
            await conn.read_head(method == "HEAD")
            break
        except upstream.HeadTooLarge:
            conn.abort()
            pool.release(conn)
            return await page(send, inbound, pages.BAD_GATEWAY, target, message=_HEAD_TOO_LARGE), 0
        except _BrowserGone:
            conn.abort()
            pool.release(conn)
            return 499, 0
        except (upstream.UpstreamClosed, OSError):
            conn.abort()
            pool.release(conn)
            # A pooled connection the app had already closed: try once more on a
            # fresh one, when nothing that cannot be sent again was sent.
            if conn.reused and not has_body:
                continue
            return await page(send, inbound, pages.BAD_GATEWAY, target), 0
    return await _relay_response(conn, pool, receive, send, target, inbound, upstream_path)


async def _send_body(conn: upstream.Connection, receive, chunked: bool) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _BrowserGone
        body = message.get("body", b"")
        if body:
            await conn.write(b"%x\r\n%s\r\n" % (len(body), body) if chunked else body)
        if not message.get("more_body"):
            break
    if chunked:
        await conn.write(b"0\r\n\r\n")


def _header(raw: list[tuple[bytes, bytes]], wanted: bytes) -> bytes | None:
    return next((value for name, value in raw if name == wanted), None)


async def _relay_response(conn, pool, receive, send, target, inbound, upstream_path) -> tuple[int, int]:
    response_headers, encoding = headers.response_headers(conn.headers, target, upstream_path)
    status = conn.status
    if target.redact and encoding:
        # Asked for identity: an encoded body could be checked for the secret only by
        # inflating it, and a few hundred KB inflate to hundreds of MB (decision 0033).
        conn.abort()  # an aborted connection is never pooled
        return await page(send, inbound, pages.CANNOT_INSPECT, target), 0
    redactor = Redactor(target.redact) if target.redact else None
    try:
        cut = _cut(conn, inbound)
    except ranges.Unsatisfiable as exc:
        conn.abort()  # an aborted connection is never pooled
        return await _unsatisfiable(send, exc.total), 0
    except ranges.Unreadable:
        conn.abort()
        return await page(send, inbound, pages.CANNOT_INSPECT, target), 0
    if cut is not None:
        response_headers = cut.headers(response_headers)
    await send({"type": "http.response.start", "status": status, "headers": response_headers})
    return status, await _relay_body(conn, pool, receive, send, redactor, cut)


def _cut(conn, inbound) -> ranges.Cut | None:
    """The part of the app's partial answer to a widened Range that the browser asked for."""
    if inbound.asked is None or conn.status != 206:
        return None
    return ranges.Cut(inbound.asked, _header(conn.headers, b"content-range"))


async def _relay_body(conn, pool, receive, send, redactor: Redactor | None, cut: ranges.Cut | None) -> int:
    """Stream the app's body to the browser; the bytes sent."""
    sent = 0
    watcher = None
    try:
        while True:
            data = conn.take()
            if data is not None and redactor is not None:
                data = redactor.feed(data)
            if conn.complete:
                break
            if data and cut is not None:
                data = cut.feed(data)
            if data:
                sent += len(data)
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if watcher is None:
                # Only a response that keeps the proxy waiting needs to notice the browser leaving.
                watcher = asyncio.ensure_future(_close_on_disconnect(receive, conn))
            await conn.fill()
    except upstream.UpstreamError:
        # The app broke off mid-response, or sent too many trailers, or the browser left:
        # returning without finishing the response makes the server close the browser's
        # connection.
        return sent
    finally:
        if watcher is not None:
            watcher.cancel()
        pool.release(conn)
    data = _last(data or b"", redactor, cut)
    await send({"type": "http.response.body", "body": data, "more_body": False})
    return sent + len(data)


def _last(data: bytes, redactor: Redactor | None, cut: ranges.Cut | None) -> bytes:
    """The body's last part, once the app's body is complete: what the redactor held back, cut."""
    if redactor is not None:
        data += redactor.flush()
    if cut is not None:
        data = cut.feed(data)
    return data


async def _unsatisfiable(send, total: bytes) -> int:
    """The asked part starts past the body's end (the app, asked for a widened part, had some)."""
    start = {
        "type": "http.response.start",
        "status": 416,
        "headers": [(b"content-range", b"bytes */" + total), (b"content-length", b"0")],
    }
    await send(start)
    await send({"type": "http.response.body", "body": b""})
    return 416


async def _close_on_disconnect(receive, conn: upstream.Connection) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            conn.abort()
            return
