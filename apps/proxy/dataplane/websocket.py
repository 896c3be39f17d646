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
import logging
import time
from datetime import UTC, datetime

from django.conf import settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from apps.core.asgiserver import WEBSOCKET_MAX_MESSAGE_BYTES
from apps.proxy import access, metrics, sessions, socket_audit
from apps.proxy.access import Target
from apps.proxy.dataplane import headers, limits, pages
from apps.proxy.dataplane.redact import Redactor
from apps.proxy.dataplane.respond import access_line

log = logging.getLogger(__name__)
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
            status = await _deny(scope, send, pages.NOT_FOUND)
            return
        if target.foreign(inbound.origin, scope, host):
            status = await _deny(scope, send, pages.DENIED, pages.FROM_ANOTHER_SITE["websocket"])
            return
        decision, count, target = await access.admit(target, inbound.route_cookie, "websocket")
        user_id = decision.user_id
        try:
            if not decision.allowed and decision.status == 503:
                status = await _deny(scope, send, pages.UNCHECKED)
            elif not decision.allowed:
                status = await _deny(
                    scope, send, pages.NO_SESSION if decision.status == 401 else pages.DENIED
                )
            elif reason := access.unavailable(target, decision):
                status = await _deny(scope, send, pages.UNAVAILABLE, reason or "The app is not running.")
            elif count is None:
                status = await _deny(scope, send, pages.BUSY, close_code=1013)
            else:
                status = await _open(scope, receive, send, target, inbound, raw_path, decision)
        finally:
            if count is not None:
                limits.release(count)
    finally:
        access_line(scope, status, target, user_id, 0, time.monotonic() - started)


async def _deny(scope, send, spec: pages.Spec, message: str = "", close_code: int = 1008) -> int:
    """Refuse the handshake: the proxy's error answer where the server supports the
    denial response extension, else a close before accepting (the server answers 403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        # No browser navigates to a WebSocket: the envelope, as for any script.
        start, body = pages.render(spec.status, spec.code, spec.title, message or spec.message, as_json=True)
        await send(
            {"type": "websocket.http.response.start", "status": spec.status, "headers": start["headers"]}
        )
        await send({"type": "websocket.http.response.body", "body": body["body"]})
        return spec.status
    await send({"type": "websocket.close", "code": close_code})
    return 403


async def _open(
    scope, receive, send, target: Target, inbound: headers.Inbound, raw_path: str, decision: sessions.Decision
) -> int:
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
        refused = (
            pages.spec(code, "The app refused the WebSocket.") if 400 <= code < 500 else pages.BAD_GATEWAY
        )
        return await _deny(scope, send, refused, "The app refused the WebSocket.")
    except TimeoutError:
        return await _deny(scope, send, pages.GATEWAY_TIMEOUT)
    except (OSError, InvalidHandshake):
        return await _deny(scope, send, pages.BAD_GATEWAY, "The app is not answering.")
    async with app:
        await send({"type": "websocket.accept", "subprotocol": app.subprotocol})
        socket = _Socket()
        opened_at = datetime.now(UTC)
        audited = {"path": scope["path"], "subprotocol": app.subprotocol or ""}
        connected = asyncio.ensure_future(_audit(socket_audit.CONNECT, target, decision, scope, audited))
        try:
            with metrics.OPEN_WEBSOCKETS.track_inprogress():
                await _relay(receive, send, app, target, inbound, scope, socket)
        finally:
            audited.update(socket.totals(opened_at))
            # Shielded: a cancelled handler still leaves the trail whole.
            await asyncio.shield(_audit_close(connected, target, decision, scope, audited))
    return 101


class _Socket:
    """What one proxied WebSocket carried and how it ended: activity for the access
    watcher, totals for the audit trail."""

    __slots__ = (
        "bytes_from_app",
        "bytes_from_browser",
        "close_code",
        "closed_by",
        "from_app",
        "from_browser",
    )

    def __init__(self):
        self.from_browser = self.from_app = self.bytes_from_browser = self.bytes_from_app = 0
        self.closed_by = ""
        self.close_code: int | None = None

    @property
    def messages(self) -> int:
        return self.from_browser + self.from_app

    def closed(self, by: str, code: int | None) -> None:
        if not self.closed_by:  # the first to close is the one that ended it
            self.closed_by, self.close_code = by, code

    def totals(self, opened_at: datetime) -> dict:
        closed_at = datetime.now(UTC)
        return {
            "connected_at": opened_at.isoformat(),
            "disconnected_at": closed_at.isoformat(),
            "duration_seconds": round((closed_at - opened_at).total_seconds(), 3),
            "messages_from_browser": self.from_browser,
            "messages_from_app": self.from_app,
            "bytes_from_browser": self.bytes_from_browser,
            "bytes_from_app": self.bytes_from_app,
            "closed_by": self.closed_by or "platform",
            "close_code": self.close_code,
        }


def _size(data: str | bytes) -> int:
    # An ASCII text's length is its size in UTF-8: no copy for the common case.
    return len(data) if isinstance(data, bytes) or data.isascii() else len(data.encode())


async def _audit(
    action: str, target: Target, decision: sessions.Decision, scope: dict, details: dict
) -> None:
    client = scope.get("client")
    try:
        await access.audit_websocket(
            action, target.route_id, decision.username, client[0] if client else None, details
        )
    except Exception:
        # The socket is open (or gone) either way; the log says which record is missing.
        log.exception("%s of route %s not audited", action, target.route_id)


async def _audit_close(connected, target: Target, decision: sessions.Decision, scope: dict, details: dict):
    await connected  # one socket's records are written in order, one at a time
    await _audit(socket_audit.DISCONNECT, target, decision, scope, details)


async def _relay(
    receive, send, app, target: Target, inbound: headers.Inbound, scope: dict, socket: _Socket
) -> None:
    tasks = [
        asyncio.ensure_future(_browser_to_app(receive, app, socket)),
        asyncio.ensure_future(_app_to_browser(app, send, socket, target.redact)),
        asyncio.ensure_future(_watch_access(target, inbound, scope, socket)),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    if tasks[2] in done and not tasks[2].cancelled() and tasks[2].result():
        # Access ended: the browser learns why, the app that its client left.
        socket.closed("platform", ACCESS_ENDED)
        await _close_browser(send, ACCESS_ENDED, tasks[2].result())
        await app.close(1001, "")


async def _browser_to_app(receive, app, socket: _Socket) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.receive":
            text = message.get("text")
            data = text if text is not None else message.get("bytes") or b""
            socket.from_browser += 1
            socket.bytes_from_browser += _size(data)
            try:
                await app.send(data)
            except ConnectionClosed:
                return  # the other direction reports the app's close
        elif message["type"] == "websocket.disconnect":
            code = message.get("code", 1000)
            socket.closed("browser", code)
            # 1005 (no code) and 1006 (connection lost) cannot be sent on.
            await app.close({1005: 1000, 1006: 1001}.get(code, code), message.get("reason") or "")
            return


async def _app_to_browser(app, send, socket: _Socket, secrets: tuple[bytes, ...]) -> None:
    try:
        async for data in app:
            socket.from_app += 1
            socket.bytes_from_app += _size(data)
            if secrets:
                data = _redacted(data, secrets)
            if isinstance(data, str):
                await send({"type": "websocket.send", "text": data})
            else:
                await send({"type": "websocket.send", "bytes": data})
    except ConnectionClosed as closed:
        if closed.sent is not None and closed.sent.code == _TOO_BIG and not closed.rcvd_then_sent:
            # The proxy closed the app's socket: its message was over the limit.
            socket.closed("platform", _TOO_BIG)
            await _close_browser(send, _TOO_BIG, "message too big")
            return
    code = {None: 1011, 1005: 1000, 1006: 1011, 1015: 1011}.get(app.close_code, app.close_code)
    socket.closed("app", code)
    reason = app.close_reason or ""
    if secrets:
        reason = _redacted(reason, secrets)  # the app's words reach script on the route too
    await _close_browser(send, code, reason)


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


async def _watch_access(target: Target, inbound: headers.Inbound, scope: dict, socket: _Socket) -> str:
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
        if socket.messages != seen:
            seen = socket.messages
            await access.touch(target)
