"""The proxy's own answers: small HTML pages with a way back to the portal, or the
API's JSON error envelope for clients that asked for JSON."""

from __future__ import annotations

import json
from html import escape

from apps.core import correlation

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}<title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}}
body{{color:#1f2933}}h1{{font-size:1.4rem}}a{{color:#0b5cad}}</style></head>
<body><h1>{title}</h1><p>{message}</p>{link}</body></html>
"""

_CSP_BASE = b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors "


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
    if as_json:
        body = json.dumps(
            {
                "error": {
                    "code": code,
                    "message": message,
                    "correlation_id": correlation.new_id(),
                    "details": {},
                }
            }
        ).encode()
        content_type = b"application/json"
    else:
        link = f'<p><a href="{escape(portal_url)}">Back to the portal</a></p>' if portal_url else ""
        body = _PAGE.format(
            title=escape(title),
            message=escape(message),
            link=link,
            refresh=f'<meta http-equiv="refresh" content="{refresh}">' if refresh else "",
        ).encode()
        content_type = b"text/html; charset=utf-8"
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", _CSP_BASE + frame_ancestors.encode()),
        *extra,
    ]
    if frame_ancestors == "'none'":
        headers.append((b"x-frame-options", b"DENY"))
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body},
    )


# status, code, title and message of each answer the proxy gives on its own
NOT_FOUND = (404, "not_found", "No such app", "Nothing is published at this address.")
NO_SESSION = (
    401,
    "unauthenticated",
    "Open this app from the portal",
    "Your session for this app is missing or has ended. Open the app again from its page in the portal.",
)
DENIED = (403, "forbidden", "Access denied", "You do not have access to this app.")
STARTING = (503, "starting", "The app is starting", "This page reloads by itself once the app is ready.")
UNAVAILABLE = (503, "unavailable", "The app is not running", "")
UNCHECKED = (
    503,
    "unavailable",
    "Try again in a moment",
    "The platform cannot check your access to this app right now.",
)
BUSY = (
    429,
    "too_many_connections",
    "Too many connections",
    "This app, or your account, has too many open connections. Close some tabs and try again.",
)
BAD_GATEWAY = (
    502,
    "bad_gateway",
    "The app is not answering",
    "The app refused the connection or broke it off.",
)
GATEWAY_TIMEOUT = (504, "gateway_timeout", "The app is not answering", "The app did not answer in time.")
CANNOT_INSPECT = (
    502,
    "bad_gateway",
    "The app's answer cannot be shown",
    "The app sent a compressed page, or a part of one, that the platform cannot check for secrets.",
)
