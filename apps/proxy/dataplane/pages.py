"""The proxy's own answers, for both data planes (nginx asks ``/_gpuaas/auth`` for
its pages): the platform's error envelope with the API's codes and the request's
correlation id, or, for a browser navigating (its ``Accept`` names ``text/html``),
a small HTML page that shows the same code and id with a way back to the portal."""

from __future__ import annotations

import json
from html import escape
from typing import NamedTuple

from apps.core import correlation
from apps.core.errors import code_for, envelope

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}<title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}}
body{{color:#1f2933}}h1{{font-size:1.4rem}}a{{color:#0b5cad}}.ref{{color:#52606d;font-size:.85rem}}</style></head>
<body><h1>{title}</h1><p>{message}</p>{link}
<p class="ref">Error <code>{code}</code> &middot; reference <code>{correlation_id}</code></p></body></html>
"""

_CSP_BASE = b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors "
# CONTRACT.md: a 429 or a 503 always says when to come back.
_RETRY_AFTER = (b"retry-after", b"5")


class Spec(NamedTuple):
    """One of the proxy's answers: its status, the API's code for it, a title and a message."""

    status: int
    code: str
    title: str
    message: str


def spec(status: int, title: str, message: str = "") -> Spec:
    return Spec(status, code_for(status), title, message)


def wants_html(accept: str) -> bool:
    """A browser navigating gets a page; any other client (script, API, WebSocket) the envelope."""
    return "text/html" in accept


def render(
    status: int,
    code: str,
    title: str,
    message: str,
    *,
    portal_url: str = "",
    as_json: bool = False,
    frame_ancestors: str = "'none'",
    refresh: int = 0,
    extra: tuple = (),
) -> tuple[dict, dict]:
    """The ``http.response.start`` and ``http.response.body`` messages of an error answer."""
    correlation_id = correlation.get()
    if as_json:
        body = json.dumps(envelope(code, message)).encode()
        content_type = b"application/json"
    else:
        link = f'<p><a href="{escape(portal_url)}">Back to the portal</a></p>' if portal_url else ""
        body = _PAGE.format(
            title=escape(title),
            message=escape(message),
            link=link,
            refresh=f'<meta http-equiv="refresh" content="{refresh}">' if refresh else "",
            code=escape(code),
            correlation_id=escape(correlation_id),
        ).encode()
        content_type = b"text/html; charset=utf-8"
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", _CSP_BASE + frame_ancestors.encode()),
        (correlation.HEADER.lower().encode(), correlation_id.encode()),
        *extra,
    ]
    if status in (429, 503) and not any(name == _RETRY_AFTER[0] for name, _ in extra):
        headers.append(_RETRY_AFTER)
    if frame_ancestors == "'none'":
        headers.append((b"x-frame-options", b"DENY"))
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body},
    )


NOT_FOUND = spec(404, "No such app", "Nothing is published at this address.")
NO_SESSION = spec(
    401,
    "Open this app from the portal",
    "Your session for this app is missing or has ended. Open the app again from its page in the portal.",
)
DENIED = spec(403, "Access denied", "You do not have access to this app.")
# With DENIED, when the Origin is not the route's own (access.Target.foreign), by kind of request.
FROM_ANOTHER_SITE = {
    "http": "This request was sent from another site.",
    "websocket": "This WebSocket was opened from another site.",
}
METHOD_NOT_ALLOWED = spec(405, "Not here", "Open the app from the portal.")
TOO_LARGE = spec(413, "Not an app link", "This request is too large.")
STARTING = spec(503, "The app is starting", "This page reloads by itself once the app is ready.")
UNAVAILABLE = spec(503, "The app is not running", "")
UNCHECKED = spec(503, "Try again in a moment", "The platform cannot check your access to this app right now.")
BUSY = spec(
    429,
    "Too many connections",
    "This app, or your account, has too many open connections. Close some tabs and try again.",
)
BAD_GATEWAY = spec(502, "The app is not answering", "The app refused the connection or broke it off.")
GATEWAY_TIMEOUT = spec(504, "The app is not answering", "The app did not answer in time.")
CANNOT_INSPECT = spec(
    502,
    "The app's answer cannot be shown",
    "The app sent a compressed page, or a part of one, that the platform cannot check for secrets.",
)
