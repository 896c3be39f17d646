"""A lean HTTP/1.1 client for app upstreams.

httpx costs more per request than the whole rest of the proxy, so requests to
upstreams go through this small client instead: keep-alive connections pooled
per upstream and per event loop, httptools for parsing (fed straight from the
event loop), bodies passed through as they arrive (no decompression, and no more
than one read buffered ahead of the browser). There is no read timeout: a
Server-Sent Events or LLM stream may stay quiet for as long as it likes; the
browser going away is what ends it.
"""

from __future__ import annotations

import asyncio

import httptools
from django.conf import settings

from apps.proxy.perloop import PerLoop

_READ_SIZE = 256 * 1024
_IDLE_PER_UPSTREAM = 64
# What a response's head (and a chunked body's trailers) may hold: an app's headers are
# kept in memory until the response is relayed, and an app could send any number.
# nginx refuses a head larger than its proxy_buffer_size the same way (a 502).
MAX_HEADERS = 256
MAX_HEAD_BYTES = 64 * 1024


class UpstreamError(Exception):
    status = 502


class ConnectTimedOut(UpstreamError):
    status = 504


class UpstreamClosed(UpstreamError):
    """The upstream closed the connection or sent something that is not HTTP."""


class HeadTooLarge(UpstreamError):
    """The upstream sent more headers, or larger ones, than a response may have."""


class Connection(asyncio.Protocol):
    """One keep-alive connection, fed by the event loop (no stream reader between the
    socket and the parser); the httptools parser calls the ``on_*`` methods."""

    __slots__ = (
        "broken",
        "buffered",
        "chunks",
        "closed",
        "complete",
        "error",
        "fresh",
        "head_bytes",
        "header_bytes",
        "headers",
        "headers_done",
        "keep_alive",
        "key",
        "parser",
        "reading_paused",
        "reused",
        "status",
        "transport",
        "until_close",
        "waiter",
        "writing_paused",
    )

    def __init__(self, key: tuple[str, int]):
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reused = self.broken = self.keep_alive = False
        self.headers_done = self.complete = self.until_close = False
        self.status, self.headers, self.chunks, self.buffered = 0, [], [], 0
        self.head_bytes = self.header_bytes = 0  # an unfinished head's, the parsed headers'
        self.fresh = self.closed = False  # data parsed since the last wait; the app's end seen
        self.error: UpstreamError | None = None
        self.waiter: asyncio.Future | None = None
        self.reading_paused = self.writing_paused = False

    # --- the event loop's side ----------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        in_head = not self.headers_done
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamClosed(f"the app sent a malformed response: {exc}"))
        if in_head and not self.headers_done:
            # A head still unfinished: the parser holds a header being received whole,
            # however long, so what the head has taken so far is counted here.
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._fail(HeadTooLarge("the app's response headers are too large"))
        self.fresh = True
        # Backpressure: a response is read no faster than the browser takes it.
        if self.buffered > _READ_SIZE and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None and self.error is None:
            self.error = UpstreamClosed(str(exc))
        self._wake()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        self.transport.abort()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def _wait(self) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    # --- parser callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.error is not None:
            return
        self.header_bytes += len(name) + len(value) + 4
        if len(self.headers) >= MAX_HEADERS or self.header_bytes > MAX_HEAD_BYTES:
            self._fail(HeadTooLarge("the app sent too many response headers, or too large ones"))
            return
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Asked now: once the message is complete the parser has forgotten it.
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # --- one exchange -------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.status, self.headers, self.chunks, self.buffered = 0, [], [], 0
        self.head_bytes = self.header_bytes = 0
        self.headers_done = self.complete = self.until_close = self.fresh = False
        self.transport.write(data)

    async def write(self, data: bytes) -> None:
        """Send part of a request body, waiting while the app is slower than the browser."""
        self.transport.write(data)
        while self.writing_paused and not self.closed:
            await self._wait()
        if self.closed:
            self.broken = True
            raise self.error or UpstreamClosed("the app closed the connection")

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
        self.buffered = 0
        if self.reading_paused and not self.closed:
            self.reading_paused = False
            self.transport.resume_reading()
        return data

    async def fill(self) -> None:
        """Read more of the body (or see its end)."""
        await self._feed()

    async def _feed(self) -> None:
        if not self.fresh and not self.closed:
            await self._wait()
        if self.error is not None:
            self.broken = True
            raise self.error
        if self.fresh:
            self.fresh = False
            return
        self.broken = True
        if self.headers_done and self.until_close:
            self.complete = True
            return
        raise UpstreamClosed("the app closed the connection")

    def abort(self) -> None:
        """Drop the connection now (the browser went away); a pending read sees its end."""
        self.broken = True
        self.transport.abort()

    @property
    def reusable(self) -> bool:
        return (
            self.complete
            and not self.broken
            and self.keep_alive
            and not self.closed
            and not self.transport.is_closing()
        )


class Pool:
    """Idle keep-alive connections per upstream (host, port)."""

    def __init__(self):
        self.idle: dict[tuple[str, int], list[Connection]] = {}

    async def connect(self, key: tuple[str, int]) -> Connection:
        idle = self.idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                conn.reused = True
                return conn
            conn.transport.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(settings.PROXY_UPSTREAM_CONNECT_SECONDS):
                _, conn = await loop.create_connection(lambda: Connection(key), key[0], key[1])
        except TimeoutError as exc:
            raise ConnectTimedOut(
                f"the app did not answer within {settings.PROXY_UPSTREAM_CONNECT_SECONDS} s"
            ) from exc
        except OSError as exc:
            raise UpstreamError(f"the app refused the connection ({exc.strerror or exc})") from exc
        return conn

    def release(self, conn: Connection) -> None:
        if conn.reusable:
            idle = self.idle.setdefault(conn.key, [])
            if len(idle) < _IDLE_PER_UPSTREAM:
                idle.append(conn)
                return
        if conn.broken:
            conn.transport.abort()
        else:
            conn.transport.close()


_pools: PerLoop[Pool] = PerLoop(Pool)


def pool() -> Pool:
    """The pool of the running event loop, so no connection is used from a loop it
    does not belong to."""
    return _pools.get()
