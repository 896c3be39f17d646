"""Proxying one WebSocket: checks before the handshake is accepted, then a relay.

Order matters: the route, ``Origin``, the session and the limits are checked
before anything is sent upstream; the upstream handshake is made before the
browser's is accepted, so the browser gets the subprotocol the app chose (and a
refusal when the app refuses). While open, access is re-checked every few
seconds: logout, revoked access and a stopped instance close the socket with 4403.

``Origin`` must be the route's own origin when present. Browsers always send it
on a WebSocket handshake, so a missing ``Origin`` means a non-browser client,
which cannot be driven by another site (the cross-site WebSocket hijacking this
check is for); such a client still needs the route cookie.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from django.conf import settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from apps.core.asgiserver import WEBSOCKET_MAX_MESSAGE_BYTES
from apps.proxy import access, metrics
from apps.proxy.access import Target
from apps.proxy.dataplane import headers, limits
from apps.proxy.dataplane.redact import Redactor
from apps.proxy.dataplane.respond import access_line

RECHECK_SECONDS = 2.0
ACCESS_ENDED = 4403
_TOO_BIG = 1009
_NOT_FORWARDED = (b"origin", b"accept-encoding")


async def handle(scope: dict, receive, send, host: str) -> None:
    started = time.monotonic()
    path = scope["path"]
    # The path as the browser sent it, as HTTP keeps it: decoded, a %23 or %3F would
    # become the start of a fragment or a query.
    raw_path = (scope.get("raw_path") or path.encode()).decode("latin-1")
    target = None if path.startswith("/_gpuaas/") else await access.resolve(host, path)
    inbound = headers.Inbound(scope, target, host)
    status, user_id = 0, None
    try:
        if (await receive())["type"] != "websocket.connect":
            return
        if target is None or target.outside(raw_path):
            status = await _deny(scope, send, 404, "No app is published at this address.")
            return
        if inbound.origin is not None and inbound.origin != target.origin:
            status = await _deny(scope, send, 403, "This WebSocket was opened from another site.")
            return
        decision, count, target = await access.admit(target, inbound.route_cookie, "websocket")
        user_id = decision.user_id
        try:
            if not decision.allowed:
                message = decision.reason if decision.status == 503 else "Open the app from the portal."
                status = await _deny(scope, send, decision.status, message)
            elif reason := access.unavailable(target, decision):
                status = await _deny(scope, send, 503, reason or "The app is not running.")
            elif count is None:
                status = await _deny(scope, send, 429, "Too many open connections.", close_code=1013)
            else:
                status = await _open(scope, receive, send, target, inbound, raw_path)
        finally:
            if count is not None:
                limits.release(count)
    finally:
        access_line(scope, status, target, user_id, 0, time.monotonic() - started)


async def _deny(scope, send, status: int, message: str, close_code: int = 1008) -> int:
    """Refuse the handshake: an HTTP answer where the server supports the denial
    response extension, else a close before accepting (the server answers 403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = message.encode()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"retry-after", b"5"),
                ]
                if status in (429, 503)
                else [(b"content-type", b"text/plain; charset=utf-8")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
        return status
    await send({"type": "websocket.close", "code": close_code})
    return 403


async def _open(scope, receive, send, target: Target, inbound: headers.Inbound, raw_path: str) -> int:
    host, port = target.upstream
    uri = f"ws://{host}:{port}{target.upstream_path(raw_path)}"
    if scope["query_string"]:
        uri += "?" + scope["query_string"].decode("latin-1")
    extra = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in (*inbound.headers, *headers.forwarding(inbound, scope, target))
        if name not in _NOT_FORWARDED
    ]
    try:
        app = await connect(
            uri,
            origin=headers.upstream_origin(target) if inbound.origin is not None else None,
            subprotocols=inbound.subprotocols or None,
            additional_headers=extra,
            user_agent_header=None,
            compression=None,
            proxy=None,  # never a proxy from the environment
            open_timeout=settings.PROXY_UPSTREAM_CONNECT_SECONDS,
            ping_interval=None,  # the browser and the app keep their own connection alive
            max_size=WEBSOCKET_MAX_MESSAGE_BYTES,  # beyond, the app's socket closes with 1009
        )
    except InvalidStatus as exc:
        code = exc.response.status_code
        return await _deny(scope, send, code if 400 <= code < 500 else 502, "The app refused the WebSocket.")
    except TimeoutError:
        return await _deny(scope, send, 504, "The app did not answer in time.")
    except (OSError, InvalidHandshake):
        return await _deny(scope, send, 502, "The app is not answering.")
    async with app:
        await send({"type": "websocket.accept", "subprotocol": app.subprotocol})
        with metrics.OPEN_WEBSOCKETS.track_inprogress():
            await _relay(receive, send, app, target, inbound, scope)
    return 101


async def _relay(receive, send, app, target: Target, inbound: headers.Inbound, scope: dict) -> None:
    traffic = [0]
    tasks = [
        asyncio.ensure_future(_browser_to_app(receive, app, traffic)),
        asyncio.ensure_future(_app_to_browser(app, send, traffic, target.redact)),
        asyncio.ensure_future(_watch_access(target, inbound, scope, traffic)),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    if tasks[2] in done and not tasks[2].cancelled() and tasks[2].result():
        # Access ended: the browser learns why, the app that its client left.
        await _close_browser(send, ACCESS_ENDED, tasks[2].result())
        await app.close(1001, "")


async def _browser_to_app(receive, app, traffic: list[int]) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.receive":
            text = message.get("text")
            traffic[0] += 1
            try:
                await app.send(text if text is not None else message.get("bytes") or b"")
            except ConnectionClosed:
                return  # the other direction reports the app's close
        elif message["type"] == "websocket.disconnect":
            code = message.get("code", 1000)
            # 1005 (no code) and 1006 (connection lost) cannot be sent on.
            await app.close({1005: 1000, 1006: 1001}.get(code, code), message.get("reason") or "")
            return


async def _app_to_browser(app, send, traffic: list[int], secrets: tuple[bytes, ...]) -> None:
    try:
        async for data in app:
            traffic[0] += 1
            if secrets:
                data = _redacted(data, secrets)
            if isinstance(data, str):
                await send({"type": "websocket.send", "text": data})
            else:
                await send({"type": "websocket.send", "bytes": data})
    except ConnectionClosed as closed:
        if closed.sent is not None and closed.sent.code == _TOO_BIG and not closed.rcvd_then_sent:
            # The proxy closed the app's socket: its message was over the limit.
            await _close_browser(send, _TOO_BIG, "message too big")
            return
    code = app.close_code
    reason = app.close_reason or ""
    if secrets:
        reason = _redacted(reason, secrets)  # the app's words reach script on the route too
    await _close_browser(send, {None: 1011, 1005: 1000, 1006: 1011, 1015: 1011}.get(code, code), reason)


def _redacted(data: str | bytes, secrets: tuple[bytes, ...]) -> str | bytes:
    """Messages arrive whole, so a secret cannot straddle two of them."""
    raw = data.encode() if isinstance(data, str) else data
    if not any(secret in raw for secret in secrets):
        return data
    raw = Redactor(secrets).flush_all(raw)
    return raw.decode(errors="replace") if isinstance(data, str) else raw


async def _close_browser(send, code: int, reason: str) -> None:
    # uvicorn's ClientDisconnected is an OSError: the browser is already gone.
    with contextlib.suppress(OSError):
        # A close frame's reason has room for 123 bytes.
        reason = reason.encode()[:123].decode(errors="ignore")
        await send({"type": "websocket.close", "code": code, "reason": reason})


async def _watch_access(target: Target, inbound: headers.Inbound, scope: dict, traffic: list[int]) -> str:
    """The reason access ended, once it has."""
    seen = 0
    while True:
        await asyncio.sleep(RECHECK_SECONDS)
        decision, _ = await access.authorize(target, inbound.route_cookie, "websocket")
        if not decision.allowed:
            return decision.reason or "access to this app ended"
        if decision.app_state != "running":
            return f"the app is {decision.app_state}"
        current = await access.resolve(inbound.host, scope["path"])
        if current is None or current.state != "active" or current.upstream != target.upstream:
            return current.state_message if current else "the app is gone"
        if traffic[0] != seen:
            seen = traffic[0]
            await access.touch(target)
