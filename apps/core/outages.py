"""What a request answers while a dependency is down: 503 ``unavailable`` with
``Retry-After`` (the error envelope on API paths, a page elsewhere), and soon, as the
connect timeouts in settings bound it. Never a 500: the request did nothing wrong,
and a client that retries after the pause gets its answer once the dependency is
back (``/readyz`` says which one is down).

Errors of the connection, not of the query: ``OperationalError`` is what PostgreSQL
(or psycopg's pool) raises when it cannot be reached or drops the connection, and
SQLite when its file is locked past the busy timeout; an integrity or data error
stays a bug.
"""

from __future__ import annotations

import logging

import redis
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.template import loader
from kombu.exceptions import OperationalError as BrokerError

from apps.core import correlation
from apps.core.errors import error_json, is_api_path

logger = logging.getLogger("gpuaas.request")

RETRY_AFTER_SECONDS = 5
_DEPENDENCIES: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    ((OperationalError, InterfaceError), "database"),
    ((redis.ConnectionError, redis.TimeoutError), "cache"),
    ((BrokerError,), "broker"),
)


def dependency_down(exc: BaseException | None) -> str | None:
    """The dependency whose unavailability ``exc`` is, or None for any other error."""
    for kinds, name in _DEPENDENCIES:
        if isinstance(exc, kinds):
            return name
    return None


def answer(request, exc: BaseException | None) -> HttpResponse | None:
    """The 503 for ``exc`` if it says a dependency is down, else None."""
    dependency = dependency_down(exc)
    if dependency is None:
        return None
    logger.warning(
        "%s unavailable on %s %s: %s", dependency, request.method, request.path, type(exc).__name__
    )
    message = f"The platform's {dependency} is not answering; retry in a few seconds."
    if is_api_path(request.path):
        return error_json(
            503, "unavailable", message, {"dependency": dependency}, retry_after=RETRY_AFTER_SECONDS
        )
    # Rendered without the request: context processors would ask the database again.
    page = loader.render_to_string(
        "503.html", {"message": message, "correlation_id": correlation.get(), "retry": RETRY_AFTER_SECONDS}
    )
    response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def websockets_answer_503(app):
    """ASGI middleware for WebSockets: a socket whose consumer meets a dependency down
    before it accepts (a channel layer group on a Redis that is gone) is refused with
    503 and ``Retry-After`` where the server lets the application answer the handshake
    (ASGI's websocket.http.response), else closed; once accepted, it is closed with
    1013 (try again later). Never the server's 500 and a traceback."""

    async def guarded(scope, receive, send):
        sent = set()  # the message types the application sent

        async def tracking(message):
            sent.add(message["type"])
            await send(message)

        try:
            await app(scope, receive, tracking)
        except Exception as exc:
            dependency = dependency_down(exc)
            if dependency is None:
                raise
            logger.warning(
                "%s unavailable on WebSocket %s: %s", dependency, scope["path"], type(exc).__name__
            )
            if sent & {"websocket.close", "websocket.http.response.start"}:
                return  # answered already
            if "websocket.accept" in sent or "websocket.http.response" not in scope.get("extensions", {}):
                await send({"type": "websocket.close", "code": 1013})
                return
            retry = str(RETRY_AFTER_SECONDS).encode()
            headers = [(b"content-type", b"text/plain"), (b"retry-after", retry)]
            await send({"type": "websocket.http.response.start", "status": 503, "headers": headers})
            body = f"The platform's {dependency} is not answering; retry in a few seconds.".encode()
            await send({"type": "websocket.http.response.body", "body": body})

    return guarded
