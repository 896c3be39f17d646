"""Sending the proxy's own answers, and its access log."""

from __future__ import annotations

import logging

from apps.proxy import metrics
from apps.proxy.access import Target
from apps.proxy.dataplane import pages
from apps.proxy.dataplane.headers import Inbound

log = logging.getLogger("gpuaas.proxy.access")


async def page(
    send,
    inbound: Inbound | None,
    spec: tuple,
    target: Target | None = None,
    *,
    message: str = "",
    portal_url: str = "",
    extra: tuple = (),
    refresh: int = 0,
) -> int:
    status, code, title, default_message = spec
    start, body = pages.render(
        status,
        code,
        title,
        message or default_message,
        portal_url=portal_url or (target.portal_url if target else ""),
        as_json=inbound is not None and not pages.wants_html(inbound.accept.decode("latin-1")),
        frame_ancestors=target.frame_ancestors if target else "'none'",
        refresh=refresh,
        extra=extra,
    )
    await send(start)
    await send(body)
    return status


async def redirect(send, status: int, location: str, extra: tuple = ()) -> int:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"location", location.encode("latin-1")),
                (b"content-length", b"0"),
                (b"cache-control", b"no-store"),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
    return status


def access_line(scope: dict, status: int, target: Target | None, user_id, sent: int, seconds: float) -> None:
    """One line per proxied request or WebSocket: no query string, cookie or header values."""
    metrics.count("websocket" if "method" not in scope else "http", status)
    if not log.isEnabledFor(logging.INFO):
        return
    # The record is made here rather than by ``log.info``, which would walk the stack
    # for the caller's file and line on every request: a third of the line's cost.
    log.handle(
        log.makeRecord(
            log.name,
            logging.INFO,
            __file__,
            0,
            "%s %s %s",
            (scope.get("method", "WEBSOCKET"), scope["path"], status),
            None,
            extra={
                "route": target.slug if target else "",
                "user_id": user_id,
                "status": status,
                "bytes_sent": sent,
                "duration_ms": round(seconds * 1000, 1),
                "client": (scope.get("client") or ("",))[0],
            },
        )
    )
