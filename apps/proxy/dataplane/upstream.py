"""A lean HTTP/1.1 client for app upstreams.

httpx costs more per request than the whole rest of the proxy, so requests to
upstreams go through this small client instead: keep-alive connections pooled
per upstream and per event loop, httptools for parsing, bodies passed through
as they arrive (no decompression, no buffering beyond one socket read). There
is no read timeout: a Server-Sent Events or LLM stream may stay quiet for as
long as it likes; the browser going away is what ends it.
"""

from __future__ import annotations

import asyncio
import weakref

import httptools
from django.conf import settings

_READ_SIZE = 256 * 1024
_IDLE_PER_UPSTREAM = 64


class UpstreamError(Exception):
    status = 502


class ConnectTimedOut(UpstreamError):
    status = 504


class UpstreamClosed(UpstreamError):
    """The upstream closed the connection or sent something that is not HTTP."""


class Connection:
    """One keep-alive connection; the httptools parser calls the ``on_*`` methods."""

    __slots__ = (
        "key",
        "reader",
        "writer",
        "parser",
        "reused",
        "status",
        "headers",
        "chunks",
        "headers_done",
        "complete",
        "until_close",
        "broken",
        "keep_alive",
    )

    def __init__(self, key: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.key, self.reader, self.writer = key, reader, writer
        self.parser = httptools.HttpResponseParser(self)
        self.reused = False
        self.broken = False
        self.keep_alive = False

    # --- parser callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Asked now: once the message is complete the parser has forgotten it.
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # --- one exchange -------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.status, self.headers, self.chunks = 0, [], []
        self.headers_done = self.complete = self.until_close = False
        self.writer.write(data)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_head(self, head_request: bool) -> None:
        while not self.headers_done:
            await self._feed()
        self.status = self.parser.get_status_code()
        if head_request:
            # The parser cannot know that a HEAD response has no body; it then
            # cannot tell where the next response starts either.
            self.complete, self.broken = True, True
        elif not self.complete:
            framed = any(name in (b"content-length", b"transfer-encoding") for name, _ in self.headers)
            self.until_close = not framed

    def take(self) -> bytes | None:
        """The body received so far and not yet taken, or None."""
        chunks = self.chunks
        if not chunks:
            return None
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        return data

    async def fill(self) -> None:
        """Read more of the body (or see its end)."""
        await self._feed()

    async def _feed(self) -> None:
        try:
            data = await self.reader.read(_READ_SIZE)
        except OSError as exc:
            self.broken = True
            raise UpstreamClosed(str(exc)) from exc
        if not data:
            self.broken = True
            if self.headers_done and self.until_close:
                self.complete = True
                return
            raise UpstreamClosed("the app closed the connection")
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.broken = True
            raise UpstreamClosed(f"the app sent a malformed response: {exc}") from exc

    def abort(self) -> None:
        """Drop the connection now (the browser went away); a pending read sees its end."""
        self.broken = True
        self.writer.transport.abort()

    @property
    def reusable(self) -> bool:
        return (
            self.complete and not self.broken and self.keep_alive and not self.writer.transport.is_closing()
        )


class Pool:
    """Idle keep-alive connections per upstream (host, port)."""

    def __init__(self):
        self.idle: dict[tuple[str, int], list[Connection]] = {}

    async def connect(self, key: tuple[str, int]) -> Connection:
        idle = self.idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.writer.transport.is_closing() and not conn.reader.at_eof():
                conn.reused = True
                return conn
            conn.writer.close()
        try:
            async with asyncio.timeout(settings.PROXY_UPSTREAM_CONNECT_SECONDS):
                reader, writer = await asyncio.open_connection(key[0], key[1], limit=_READ_SIZE)
        except TimeoutError as exc:
            raise ConnectTimedOut(
                f"the app did not answer within {settings.PROXY_UPSTREAM_CONNECT_SECONDS} s"
            ) from exc
        except OSError as exc:
            raise UpstreamError(f"the app refused the connection ({exc.strerror or exc})") from exc
        return Connection(key, reader, writer)

    def release(self, conn: Connection) -> None:
        if conn.reusable:
            idle = self.idle.setdefault(conn.key, [])
            if len(idle) < _IDLE_PER_UPSTREAM:
                idle.append(conn)
                return
        if conn.broken:
            conn.writer.transport.abort()
        else:
            conn.writer.close()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = weakref.WeakKeyDictionary()


def pool() -> Pool:
    """The pool of the running event loop: one per process in production (one loop),
    one per server in tests, so no connection is used from a loop it does not belong to."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None:
        found = _pools[loop] = Pool()
    return found
