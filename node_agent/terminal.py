"""The node's side of the web terminal: a PTY running a login shell, relayed to the
platform over WebSockets the agent opens itself (the browser never reaches a node).

One control socket (``/ws/agent/v1/terminals/``) tells the agent which sessions to
open; each session then has a socket of its own (``/ws/agent/v1/terminal/{id}/``)
carrying the shell's output as binary frames (an 8-byte big-endian offset, then
the bytes) and the browser's input, resizes and acknowledgements as JSON.

Every buffer is bounded. The agent reads the PTY only while the browser has
acknowledged all but ``WINDOW_BYTES`` of what the shell wrote; past that the
shell blocks on its own write (a ``cat`` of a huge file waits for the browser).
The ring keeps at least ``RING_BYTES`` (more than the window), so a browser that
reconnects with the offset it has is sent exactly the bytes it missed. Input
waiting for a shell that does not read is bounded too: the socket stops being
read, and TCP pushes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import random
import signal
import struct
import threading
import time
from collections import deque

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

logger = logging.getLogger(__name__)

WINDOW_BYTES = 4 * 1024 * 1024
RING_BYTES = 8 * 1024 * 1024
READ_BYTES = 64 * 1024
# A frame carries what gathered in the ring since the last one, up to this: fewer, larger
# frames when the browser is behind.
FRAME_BYTES = 128 * 1024
GATHER_SECONDS = 0.002
FRAMES_IN_FLIGHT = 32  # well under the channel layer's 100 messages a channel
INPUT_PENDING_BYTES = 256 * 1024
MAX_MESSAGE_BYTES = 1024 * 1024
MAX_SESSIONS = 32
# A session whose socket cannot be restored for this long (the platform gone) ends.
RECONNECT_GIVE_UP_SECONDS = 300.0
KILL_GRACE_SECONDS = 2.0
# The session socket closed by the platform with one of these codes is over for good.
FINAL_CLOSE_CODES = range(4000, 5000)
HEADER = struct.Struct(">Q")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Whose shell the terminal runs: the runtime user the platform names (the agent,
# running as root, switches to it), or the agent's own user (the embedded default,
# where the local agent runs as the user the portal runs as).
TERMINAL_USERS = ("runtime", "agent")


class Gone(Exception):
    """The bytes asked for have left the ring; ``start`` is the oldest it still has."""

    def __init__(self, start: int):
        super().__init__(f"the ring starts at {start}")
        self.start = start


class RingBuffer:
    """The last bytes of a stream, addressed by their absolute offset in it.

    It keeps at least ``capacity`` bytes (and at most twice that): trimming only
    when twice over moves each byte once, where trimming on every append would
    move the whole ring for each chunk.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.start = 0
        self._data = bytearray()

    @property
    def end(self) -> int:
        return self.start + len(self._data)

    def append(self, data: bytes) -> None:
        self._data += data
        if len(self._data) > 2 * self.capacity:
            drop = len(self._data) - self.capacity
            del self._data[:drop]
            self.start += drop

    def read(self, offset: int, limit: int) -> bytes:
        """At most ``limit`` bytes from ``offset``, which lies between ``start`` and ``end``."""
        if offset < self.start:
            raise Gone(self.start)
        if offset > self.end:
            raise ValueError(f"offset {offset} is past the end {self.end}")
        index = offset - self.start
        return bytes(self._data[index : index + limit])


def websocket_base(url: str) -> str:
    base = url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :]
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :]
    raise ValueError(f"not an http(s) URL: {url}")


class ShellRefused(Exception):
    """The shell could not be started for that user on this node."""


def login_command(user: str, terminal_user: str):
    """``(argv, env, cwd, preexec)`` for a login shell as ``user`` (see ``TERMINAL_USERS``)."""
    if terminal_user == "agent":
        entry = pwd.getpwuid(os.geteuid())
    else:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ShellRefused(f"there is no user {user!r} on this node") from None
        if entry.pw_uid != os.geteuid() and os.geteuid() != 0:
            raise ShellRefused(f"the node agent cannot start a shell as {user!r} (it does not run as root)")
    shell = entry.pw_shell or "/bin/sh"
    if shell.endswith(("nologin", "false")):
        raise ShellRefused(f"{entry.pw_name!r} has no login shell")
    env = {
        "HOME": entry.pw_dir,
        "USER": entry.pw_name,
        "LOGNAME": entry.pw_name,
        "SHELL": shell,
        "PATH": DEFAULT_PATH,
        "TERM": "xterm-256color",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    preexec = None
    if entry.pw_uid != os.geteuid():

        def preexec() -> None:  # in the child, before exec: become the runtime user
            os.initgroups(entry.pw_name, entry.pw_gid)
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)

    cwd = entry.pw_dir if os.path.isdir(entry.pw_dir) else "/"
    return [shell, "-l"], env, cwd, preexec


class PtySession:
    """One shell and its ring; outlives the sockets that carry it."""

    def __init__(self, relay: TerminalRelay, session_id: str, user: str, cols: int, rows: int):
        self.relay, self.id, self.user = relay, session_id, user
        self.cols, self.rows = _dimension(cols, 80), _dimension(rows, 24)
        self.ring = RingBuffer(RING_BYTES)
        self.sent = 0  # the next offset to send on the current socket
        self.acked = 0  # what the browser has
        self.process = None
        self.fd: int | None = None
        self.reading = False
        self.exit_code: int | None = None
        self.exited = asyncio.Event()  # the shell's process has ended
        self.eof = False  # and everything it wrote has been read
        self.ended = False
        self.error = ""
        self._wake = asyncio.Event()
        self._in_flight: deque[int] = deque()  # end offsets of frames sent, not yet acknowledged
        self._pending_input = bytearray()
        self._input_drained = asyncio.Event()
        self._input_drained.set()

    # --- the shell --------------------------------------------------------------

    def spawn(self) -> None:
        from ptyprocess import PtyProcess  # only nodes that open terminals need it

        argv, env, cwd, preexec = login_command(self.user, self.relay.terminal_user)
        # The size is set on the PTY before the shell starts: its first output fits.
        self.process = PtyProcess.spawn(
            argv, cwd=cwd, env=env, dimensions=(self.rows, self.cols), preexec_fn=preexec
        )
        self.fd = self.process.fd
        os.set_blocking(self.fd, False)
        self._reaper = asyncio.get_running_loop().create_task(self._reap())
        self._resume_reading()

    def _resume_reading(self) -> None:
        if not self.reading and self.fd is not None and not self.eof:
            asyncio.get_running_loop().add_reader(self.fd, self._readable)
            self.reading = True

    def _pause_reading(self) -> None:
        if self.reading:
            asyncio.get_running_loop().remove_reader(self.fd)
            self.reading = False

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:  # EIO: every process on the PTY has closed it
            data = b""
        if not data:
            self._pause_reading()
            self.eof = True
            self._wake.set()
            return
        self.ring.append(data)
        self._wake.set()
        if self.ring.end - self.acked >= WINDOW_BYTES:
            self._pause_reading()  # the browser is behind: let the shell block

    async def _reap(self) -> None:
        process = self.process
        await asyncio.to_thread(process.wait)
        code = process.exitstatus
        self.exit_code = code if code is not None else 128 + (process.signalstatus or 0)
        self.exited.set()
        self._wake.set()

    def _write_input(self, data: bytes) -> None:
        if self.fd is None or self.exited.is_set():
            return
        self._pending_input += data
        self._flush_input()

    def _flush_input(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            written = os.write(self.fd, self._pending_input) if self._pending_input else 0
        except BlockingIOError:
            written = 0
        except OSError:
            self._pending_input.clear()
            written = 0
        del self._pending_input[:written]
        loop.remove_writer(self.fd)
        if self._pending_input:
            loop.add_writer(self.fd, self._flush_input)
            if len(self._pending_input) >= INPUT_PENDING_BYTES:
                self._input_drained.clear()
        else:
            self._input_drained.set()

    async def kill(self) -> None:
        """Hang up the shell's whole session, then kill what is left of it."""
        self.ended = True
        process = self.process
        if process is None or self.exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGHUP)
        try:
            await asyncio.wait_for(self.exited.wait(), KILL_GRACE_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            await self.exited.wait()

    def close(self) -> None:
        if self.fd is not None:
            self._pause_reading()
            loop = asyncio.get_running_loop()
            loop.remove_writer(self.fd)
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.close(force=True)

    # --- the socket ---------------------------------------------------------------

    async def run(self) -> None:
        try:
            self.spawn()
        except (ShellRefused, OSError) as exc:
            self.error = str(exc)
            logger.warning("terminal %s: %s", self.id, exc)
        try:
            await self._carry()
        finally:
            await self.kill()
            self.close()
            logger.info("terminal %s ended", self.id)

    async def _carry(self) -> None:
        """Connect the session's socket and relay; connect again after a drop."""
        uri = f"{self.relay.base}/ws/agent/v1/terminal/{self.id}/"
        lost_since, attempt = None, 0
        while not self.ended and not self.relay.stopping.is_set():
            try:
                async with connect(
                    uri,
                    additional_headers=self.relay.headers(),
                    max_size=MAX_MESSAGE_BYTES,
                    open_timeout=10,
                    ping_interval=20,
                    ping_timeout=20,
                ) as socket:
                    lost_since, attempt = None, 0
                    await self._relay(socket)
                    if socket.close_code in FINAL_CLOSE_CODES:
                        return
            except InvalidStatus as exc:
                if exc.response.status_code < 500:
                    logger.warning(
                        "terminal %s refused by the platform (%s)", self.id, exc.response.status_code
                    )
                    return
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError):
                pass
            if self.ended:
                return
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > RECONNECT_GIVE_UP_SECONDS:
                logger.warning("terminal %s: the platform is unreachable; ending it", self.id)
                return
            await asyncio.sleep(_backoff(attempt))
            attempt += 1

    async def _relay(self, socket) -> None:
        # What was in flight on a lost socket may never have arrived: start again from
        # what the browser confirmed (it drops any bytes it already has).
        self.sent = max(self.acked, self.ring.start)
        self._in_flight.clear()
        if self.error:
            await socket.send(json.dumps({"type": "error", "message": self.error}))
            await socket.wait_closed()
            self.ended = True
            return
        pump = asyncio.create_task(self._pump(socket))
        try:
            async for message in socket:
                if isinstance(message, str):
                    await self._command(json.loads(message))
                if self.ended:
                    break
        except (ConnectionClosed, ValueError):
            pass
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await pump

    async def _pump(self, socket) -> None:
        exit_sent = False
        while True:
            self._wake.clear()
            while self.sent < self.ring.end and self._room():
                if self._in_flight and self.ring.end - self.sent < FRAME_BYTES and self.reading:
                    # Output is streaming: let it gather into a larger frame (a typed
                    # key's echo, with nothing in flight, goes at once).
                    await asyncio.sleep(GATHER_SECONDS)
                start = self.sent
                chunk = self.ring.read(start, FRAME_BYTES)
                await socket.send(HEADER.pack(start) + chunk)
                if self.sent == start:  # else a browser came back meanwhile and rewound it
                    self.sent = start + len(chunk)
                    self._in_flight.append(self.sent)
            if self.eof and self.exited.is_set() and not exit_sent:
                await socket.send(json.dumps({"type": "exit", "code": self.exit_code}))
                exit_sent = True
            await self._wake.wait()

    async def _command(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "input" and isinstance(message.get("data"), str):
            self._write_input(message["data"].encode("utf-8", "surrogateescape"))
            await self._input_drained.wait()
        elif kind == "resize":
            self.cols, self.rows = (
                _dimension(message.get("cols"), self.cols),
                _dimension(message.get("rows"), self.rows),
            )
            if self.process is not None and not self.exited.is_set():
                self.process.setwinsize(self.rows, self.cols)
        elif kind == "ack":
            self._acknowledge(message.get("offset"))
        elif kind == "resume":
            self._rewind(message.get("offset"))
        elif kind == "close":
            self.ended = True

    def _room(self) -> bool:
        """Whether another frame may go: the browser's channel on the platform holds a
        bounded number of messages, so frames in flight are counted too (while the
        limit holds, output gathers in the ring and the next frame is larger)."""
        while self._in_flight and self._in_flight[0] <= self.acked:
            self._in_flight.popleft()
        return len(self._in_flight) < FRAMES_IN_FLIGHT

    def _acknowledge(self, offset) -> None:
        if not isinstance(offset, int):
            return
        self.acked = max(self.acked, min(offset, self.ring.end))
        self._wake.set()
        if self.ring.end - self.acked < WINDOW_BYTES:
            self._resume_reading()

    def _rewind(self, offset) -> None:
        """A browser came back having ``offset`` bytes: send it what follows."""
        if not isinstance(offset, int) or offset < 0:
            return
        offset = min(max(offset, self.ring.start), self.ring.end)
        self.sent = offset
        self._in_flight.clear()  # what was in flight is lost or will be dropped as a repeat
        self._acknowledge(offset)
        self._wake.set()


def _dimension(value, default: int) -> int:
    return value if isinstance(value, int) and 1 <= value <= 1000 else default


def _backoff(attempt: int) -> float:
    return min(30.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)


class TerminalRelay:
    """The agent's terminals: a thread with its own event loop, fed by the control socket."""

    def __init__(self, url: str, credential: str, terminal_user: str = "runtime"):
        if terminal_user not in TERMINAL_USERS:
            raise ValueError(f"terminal user must be one of {TERMINAL_USERS}")
        self.base = websocket_base(url)
        self.credential, self.terminal_user = credential, terminal_user
        self.stopping = threading.Event()
        self.sessions: dict[str, PtySession] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="terminal-relay", daemon=True)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Node {self.credential}"}

    def start(self) -> TerminalRelay:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End every shell (they do not outlive the agent, unlike workloads)."""
        self.stopping.set()
        loop = self._loop
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(self._end_all(), loop)
        self._thread.join(timeout)

    async def _end_all(self) -> None:
        await asyncio.gather(*(session.kill() for session in list(self.sessions.values())))
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._control())
        except asyncio.CancelledError:
            pass
        finally:
            self._loop.close()

    async def _control(self) -> None:
        uri = f"{self.base}/ws/agent/v1/terminals/"
        attempt = 0
        while not self.stopping.is_set():
            try:
                async with connect(
                    uri, additional_headers=self.headers(), open_timeout=10, ping_interval=20, ping_timeout=20
                ) as socket:
                    attempt = 0
                    await socket.send(json.dumps({"type": "hello", "sessions": list(self.sessions)}))
                    async for message in socket:
                        if isinstance(message, str):
                            self._open(json.loads(message))
            except InvalidStatus as exc:
                logger.warning("terminal relay refused by the platform (HTTP %s)", exc.response.status_code)
                attempt = max(attempt, 4)
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError, ValueError):
                pass
            await asyncio.sleep(_backoff(attempt))
            attempt += 1

    def _open(self, message: dict) -> None:
        session_id = str(message.get("session", ""))
        if message.get("type") != "open" or not session_id or session_id in self.sessions:
            return
        session = PtySession(
            self, session_id, str(message.get("user", "")), message.get("cols"), message.get("rows")
        )
        if len(self.sessions) >= MAX_SESSIONS:
            session.error = f"this node already has {MAX_SESSIONS} terminals open"
        self.sessions[session_id] = session
        logger.info("terminal %s opened", session_id)
        task = asyncio.get_running_loop().create_task(session.run())
        task.add_done_callback(lambda _: self.sessions.pop(session_id, None))
