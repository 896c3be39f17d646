"""A web terminal client for tests and the benchmark: the browser's side of
``/ws/allocations/{a}/terminal/`` (the page's terminal.js, in Python), over a real
socket with the user's platform session cookie."""

from __future__ import annotations

import contextlib
import json
import struct
import time

from django.conf import settings
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.proxy import login_session

HEADER = struct.Struct(">Q")
TAIL_BYTES = 4096
ACK_BYTES = 64 * 1024
# How long a test waits for output or for the close: generous, because a busy CI host
# starts the node agent and its shell slowly (20 s was seen to fall short at load 7), and
# how soon either comes is benchmarks/terminal.py's to measure, not a test's.
PATIENCE_SECONDS = 60.0


def socket_url(portal, allocation_id, **query) -> str:
    base = portal.url.replace("http://", "ws://")
    params = "&".join(f"{key}={value}" for key, value in query.items())
    return f"{base}/ws/allocations/{allocation_id}/terminal/?{params}"


def portal_headers(portal, session_key: str) -> dict:
    return {"Origin": portal.url, "Cookie": f"{settings.SESSION_COOKIE_NAME}={session_key}"}


class Terminal:
    """What a browser tab holds: the output received so far, acknowledged as it comes."""

    def __init__(self, portal, allocation_id, session_key: str):
        self.portal, self.allocation_id, self.session_key = portal, allocation_id, session_key
        self.output = bytearray()
        self.session_id: str | None = None
        self.ended: dict | None = None
        self.ready = False
        self.socket: ClientConnection | None = None
        self.keep = True  # False: keep only the last bytes (a 50 MB cat)
        self.received = 0
        self.acked = 0
        self._sockets = contextlib.ExitStack()
        self._asked = (-1, 0)

    @classmethod
    def open(cls, portal, allocation, user, *, cols: int = 80, rows: int = 24) -> Terminal:
        terminal = cls(portal, allocation.pk, login_session(user).session_key)
        terminal.connect(cols=cols, rows=rows)
        return terminal

    def connect(self, **query) -> None:
        if self.session_id:
            query = {"session": self.session_id, "offset": self.received}
        self.socket = self._sockets.enter_context(
            connect(
                socket_url(self.portal, self.allocation_id, **query),
                additional_headers=portal_headers(self.portal, self.session_key),
                max_size=None,
                open_timeout=10,
            )
        )
        self.on_message(self.socket.recv(timeout=10))

    def drop(self) -> None:
        self.socket.close()

    def send(self, message: dict) -> None:
        self.socket.send(json.dumps(message))

    def type(self, text: str) -> None:
        self.send({"type": "input", "data": text})

    def resize(self, cols: int, rows: int) -> None:
        self.send({"type": "resize", "cols": cols, "rows": rows})

    def on_message(self, message) -> None:
        if isinstance(message, str):
            body = json.loads(message)
            if body["type"] == "session":
                self.session_id = body["id"]
            elif body["type"] == "ready":
                self.ready = True
            elif body["type"] in ("ended", "taken_over"):
                self.ended = body
            return
        (offset,) = HEADER.unpack_from(message)
        data = memoryview(message)[HEADER.size :]
        if offset > self.received:  # a frame was lost: ask again (once a second at most)
            if self._asked != (self.received, int(time.monotonic())):
                self._asked = (self.received, int(time.monotonic()))
                self.send({"type": "resume", "offset": self.received})
            return
        data = data[self.received - offset :]
        if not len(data):
            return
        self.received += len(data)
        self.output += data
        if not self.keep and len(self.output) > TAIL_BYTES:
            del self.output[:-TAIL_BYTES]
        if self.received - self.acked >= ACK_BYTES:
            self.acknowledge()

    def acknowledge(self) -> None:
        if self.received > self.acked:
            self.acked = self.received
            self.send({"type": "ack", "offset": self.acked})

    def pump(self, timeout: float) -> bool:
        """Handle one message; False when none came within ``timeout`` or the socket closed."""
        try:
            try:
                message = self.socket.recv(timeout=0.005)
            except TimeoutError:
                self.acknowledge()  # the output paused: say what arrived, as the page does
                message = self.socket.recv(timeout=timeout)
        except TimeoutError:
            return False
        self.on_message(message)
        return True

    def read_until(self, predicate, timeout: float = PATIENCE_SECONDS) -> bytes:
        deadline = time.monotonic() + timeout
        while not predicate(bytes(self.output)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"terminal output never matched; last bytes: {bytes(self.output[-400:])!r}"
                )
            self.pump(min(remaining, 1.0))
        return bytes(self.output)

    def expect(self, marker: bytes, timeout: float = PATIENCE_SECONDS) -> bytes:
        return self.read_until(lambda out: marker in out, timeout)

    def wait_closed(self, timeout: float = PATIENCE_SECONDS) -> int | None:
        """Read until the portal closes the socket; its close code."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.pump(0.5)
        except ConnectionClosed:
            return self.socket.close_code
        raise AssertionError("the terminal stayed open")

    def close(self) -> None:
        self._sockets.close()
