"""Redis commands of the proxy's hot path, pipelined on one connection per event loop.

Every proxied request reads its decision and counts its connection in (one
command), then gives the count back (another). redis-py spent more CPU building,
sending and parsing such commands than the proxy spent on everything else but
uvicorn (decisions 0017, 0019). This speaks RESP2 over an ``asyncio.Protocol``: a
command is encoded once, the commands issued in one turn of the event loop leave
in one write, and replies are matched to their callers in order as they arrive.
Nothing waits for a batch to fill.

Only what the proxy sends is supported: commands with bulk-string arguments and
the five reply types. One connection per process also means a burst (a thousand
WebSockets closing at once) cannot exhaust a pool: every count is given back.
"""

from __future__ import annotations

import asyncio
import collections
import ssl

from redis.connection import parse_url

from apps.proxy.perloop import PerLoop

_CONNECT_TIMEOUT = 5.0
_INCOMPLETE = object()
# Commands as sent, by the command: a session's requests send the same few commands
# (its decision read, its counts) again and again.
_encoded: dict[tuple, bytes] = {}


class ReplyError(Exception):
    """Redis answered this command with an error (the connection is fine)."""


class Pipeline:
    def __init__(self, url: str):
        options = parse_url(url)
        self.path = options.get("path")  # unix://
        self.host = options.get("host", "127.0.0.1")
        self.port = int(options.get("port", 6379))
        self.tls = url.startswith("rediss://")
        # Sent first on every connection; their replies are checked like any other.
        self.hello = []
        if options.get("password"):
            user = [options["username"]] if options.get("username") else []
            self.hello.append(["AUTH", *user, options["password"]])
        if options.get("db"):
            self.hello.append(["SELECT", options["db"]])
        self.transport: asyncio.Transport | None = None
        self.connecting: asyncio.Task | None = None
        self.queued: list[bytes] = []
        self.queued_futures: list[asyncio.Future] = []
        self.waiting: collections.deque[asyncio.Future] = collections.deque()
        self.buffer = bytearray()
        self.flush_scheduled = False

    def call(self, *command) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        data = _encoded.get(command)
        if data is None:
            if len(_encoded) >= 10_000:
                _encoded.clear()
            data = _encoded[command] = encode(command)
        self.queued.append(data)
        self.queued_futures.append(future)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self.flush_scheduled = False
        if not self.queued:
            return
        if self.transport is None:
            if self.connecting is None:
                self.connecting = asyncio.ensure_future(self._connect())
            return
        self.transport.write(b"".join(self.queued))
        self.waiting.extend(self.queued_futures)
        self.queued, self.queued_futures = [], []

    async def _connect(self) -> None:
        try:
            self.transport = await self._open()
        except ConnectionError as exc:
            self._fail(self.queued_futures, exc)
            self.queued, self.queued_futures = [], []
        finally:
            self.connecting = None
        self._flush()

    async def _open(self) -> asyncio.Transport:
        loop = asyncio.get_running_loop()
        if self.path:
            connecting = loop.create_unix_connection(lambda: _Protocol(self), self.path)
        else:
            context = ssl.create_default_context() if self.tls else None
            connecting = loop.create_connection(lambda: _Protocol(self), self.host, self.port, ssl=context)
        try:
            transport, _ = await asyncio.wait_for(connecting, _CONNECT_TIMEOUT)
        except (TimeoutError, OSError) as exc:
            raise ConnectionError(f"Redis at {self.where}: {exc}") from exc
        # The setup's replies come first: a command must never run as another user
        # or on another database because AUTH or SELECT was refused.
        setup = [loop.create_future() for _ in self.hello]
        self.waiting.extend(setup)
        transport.write(b"".join(encode(command) for command in self.hello))
        for reply in await asyncio.gather(*setup, return_exceptions=True):
            if isinstance(reply, Exception):
                transport.close()
                raise ConnectionError(f"Redis at {self.where} refused the setup: {reply}")
        return transport

    @property
    def where(self) -> str:
        return self.path or f"{self.host}:{self.port}"

    def _received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        position = 0
        while self.waiting:
            reply, after = parse(buffer, position)
            if reply is _INCOMPLETE:
                break
            position = after
            future = self.waiting.popleft()
            if future.done():  # its caller went away
                continue
            if isinstance(reply, ReplyError):
                future.set_exception(reply)
            else:
                future.set_result(reply)
        del buffer[:position]

    def _lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.buffer.clear()
        waiting, self.waiting = list(self.waiting), collections.deque()
        self._fail(waiting, ConnectionError(f"Redis at {self.where} closed the connection: {exc}"))

    @staticmethod
    def _fail(futures, exc: Exception) -> None:
        for future in futures:
            if not future.done():
                future.set_exception(exc)


class _Protocol(asyncio.Protocol):
    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def data_received(self, data: bytes) -> None:
        self.pipeline._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pipeline._lost(exc)


def encode(command) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for argument in command:
        if isinstance(argument, str):
            argument = argument.encode()
        elif isinstance(argument, int):
            argument = b"%d" % argument
        parts.append(b"$%d\r\n%s\r\n" % (len(argument), argument))
    return b"".join(parts)


def parse(buffer: bytearray, position: int):
    """One reply from ``buffer`` at ``position``: (reply, position after it), or
    (_INCOMPLETE, position) when it has not all arrived yet."""
    end = buffer.find(b"\r\n", position)
    if end == -1:
        return _INCOMPLETE, position
    kind = buffer[position]
    line = bytes(buffer[position + 1 : end])
    after = end + 2
    if kind == 36:  # $ bulk string
        length = int(line)
        if length < 0:
            return None, after
        if len(buffer) < after + length + 2:
            return _INCOMPLETE, position
        return bytes(buffer[after : after + length]), after + length + 2
    if kind == 58:  # : integer
        return int(line), after
    if kind == 42:  # * array
        count = int(line)
        if count < 0:
            return None, after
        items = []
        for _ in range(count):
            item, after = parse(buffer, after)
            if item is _INCOMPLETE:
                return _INCOMPLETE, position
            items.append(item)
        return items, after
    if kind == 43:  # + simple string
        return line, after
    if kind == 45:  # - error
        return ReplyError(line.decode("utf-8", "replace")), after
    raise ValueError(f"not a RESP2 reply: {bytes(buffer[position:end])!r}")


_pipelines: PerLoop[dict[str, Pipeline]] = PerLoop(dict)


def call(url: str, *command) -> asyncio.Future:
    """The reply to a Redis command, sent with the others of this turn of the event
    loop, on this event loop's connection to ``url``."""
    pipelines = _pipelines.get()
    pipeline = pipelines.get(url)
    if pipeline is None:
        pipeline = pipelines[url] = Pipeline(url)
    return pipeline.call(*command)
