"""Request bodies beyond ``DATA_UPLOAD_MAX_MEMORY_SIZE`` are refused with 413 before
Django reads them: Django's ASGI handler spools any body, whatever its size, before a
view or its own size check runs. App routes never come here (the platform proxy
streams their bodies); this is the portal's and the API's limit."""

from __future__ import annotations

import json

from django.conf import settings

from apps.core import correlation


class _TooBig(Exception):
    pass


class RequestBodyLimit:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = next((value for name, value in scope["headers"] if name == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _refuse(send, limit)
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise _TooBig
            return message

        try:
            await self.app(scope, counted, send)
        except _TooBig:
            await _refuse(send, limit)


async def _refuse(send, limit: int) -> None:
    correlation_id = correlation.new_id()
    body = json.dumps(
        {
            "error": {
                "code": "payload_too_large",
                "message": f"The request body is larger than the {limit} bytes the API accepts.",
                "correlation_id": correlation_id,
                "details": {"limit": limit},
            }
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-correlation-id", correlation_id.encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
