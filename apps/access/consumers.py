"""The web terminal's sockets: the browser's, and the two the node agent opens
(its control socket and one per session). They meet through channel-layer groups
(``apps.access.terminals``), so the browser and the agent may be served by
different portal processes, and the browser never connects to a node.

Output goes agent -> portal -> browser as binary frames: an 8-byte big-endian
offset in the shell's output, then the bytes. The browser acknowledges what it
has written; the agent sends no more than its window past the acknowledged
offset, so no buffer on the way (the channel layer, these consumers, the
browser's socket) grows with the output. A browser that comes back gives the
session id and the offset it has, and the agent replays from its ring.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from datetime import UTC, datetime
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from apps.access import recordings, terminals
from apps.access.models import TerminalSession
from apps.allocations import nodes
from apps.core import audit
from apps.core.errors import ApiError, NotFound, Unauthenticated, ValidationFailed, envelope
from apps.core.origins import scope_header

HEADER = struct.Struct(">Q")
# Close codes the browser's script reads: the session is over, or another window took it.
ENDED = 4000
TAKEN_OVER = 4001
WATCH_SECONDS = 1.0
PEER_WAIT_SECONDS = 5.0
OPEN_RETRY_SECONDS = 2.0
INPUT_NOTE_SECONDS = 30.0  # how often the last keystroke's time is written down


def _dimension(query: dict, name: str, default: int) -> int:
    try:
        value = int(query.get(name, [default])[0])
    except ValueError:
        raise ValidationFailed(details={name: ["Not a number."]}) from None
    if not 1 <= value <= 1000:
        raise ValidationFailed(details={name: ["Between 1 and 1000."]})
    return value


def _offset(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class _Refusing(AsyncWebsocketConsumer):
    async def refuse(self, error: ApiError) -> None:
        """Refuse the handshake with the contract's error envelope and status where the
        server supports the denial response (uvicorn does), else a plain refusal."""
        if "websocket.http.response" not in self.scope.get("extensions", {}):
            await self.close(code=4000 + error.status_code)
            return
        body = json.dumps(envelope(error.code, error.message, error.details)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if error.retry_after:
            headers.append((b"retry-after", str(error.retry_after).encode()))
        await self.base_send(
            {"type": "websocket.http.response.start", "status": error.status_code, "headers": headers}
        )
        await self.base_send({"type": "websocket.http.response.body", "body": body})

    async def group_send(self, group: str, message: dict) -> None:
        await self.channel_layer.group_send(group, message)

    async def send_peer(self, channel: str | None, message: dict, *, wait: bool) -> bool:
        """Send to the other side's own channel. A full channel (its socket is slow or
        gone) is waited for a little when ``wait`` (input), else skipped (output: the
        browser sees the gap in offsets and asks for the bytes again)."""
        deadline = time.monotonic() + PEER_WAIT_SECONDS
        while channel is not None:
            try:
                await self.channel_layer.send(channel, message)
            except ChannelFull:
                if not wait or time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.01)
            else:
                return True
        return False


# --- the browser's socket -------------------------------------------------------------


@database_sync_to_async
def _open_or_resume(user, allocation_id, query: dict, session_key: str | None, source_ip: str | None):
    from apps.tenancy import principal as principals

    token = audit.bind_source_ip(source_ip)
    try:
        principal = principals.for_user(user)
        login = terminals.login_digest(session_key)
        session_id = query.get("session", [""])[0]
        if session_id:
            return terminals.resume_session(principal, allocation_id, session_id, login_session=login), True
        cols, rows = _dimension(query, "cols", 80), _dimension(query, "rows", 24)
        return terminals.open_session(
            principal, allocation_id, cols=cols, rows=rows, login_session=login
        ), False
    finally:
        audit.unbind_source_ip(token)


class BrowserTerminalConsumer(_Refusing):
    """``/ws/allocations/{a}/terminal/?cols=&rows=`` opens a session;
    ``?session=ID&offset=N`` resumes one."""

    session_id: str | None = None
    _opening: asyncio.Task | None = None
    # Until the agent's side is up, what the browser sends waits here (bounded): typing
    # as the page opens must not be lost.
    _early: list | None = None
    _early_bytes = 0
    agent_channel: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(Unauthenticated("Sign in to open a terminal."))
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        session_key = getattr(self.scope.get("session"), "session_key", None)
        client = self.scope.get("client") or (None,)
        try:
            session, resumed = await _open_or_resume(
                user, self.scope["url_route"]["kwargs"]["allocation_id"], query, session_key, client[0]
            )
        except ApiError as error:
            await self.refuse(error)
            return
        self.session_id = str(session.pk)
        await self.channel_layer.group_add(terminals.browser_group(self.session_id), self.channel_name)
        await self.accept()
        await self.send(
            text_data=json.dumps(
                {
                    "type": "session",
                    "id": self.session_id,
                    "state": session.state,
                    "cols": session.cols,
                    "rows": session.rows,
                }
            )
        )
        agent = terminals.agent_group(self.session_id)
        # Until the agent's socket answers with its channel, what the browser sends waits.
        self._early = []
        # Attached first: the agent's side sends the replay to the socket attached last.
        await self.group_send(agent, {"type": "terminal.attached", "channel": self.channel_name})
        if resumed:
            await self.group_send(
                terminals.browser_group(self.session_id),
                {"type": "terminal.takeover", "channel": self.channel_name},
            )
            offset = _offset(_int(query.get("offset", ["0"])[0])) or 0
            await self.group_send(agent, {"type": "terminal.resume", "offset": offset})
        else:
            self._opening = asyncio.create_task(self._ask_agent(session))

    async def _ask_agent(self, session: TerminalSession):
        """Ask the node's agent for the shell until its socket connects (a control socket
        that was reconnecting missed the first ask; the agent ignores repeats)."""
        ask = terminals.open_request(session)
        deadline = time.monotonic() + settings.TERMINAL_OPEN_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            await self.group_send(terminals.node_group(session.node_id), ask)
            await asyncio.sleep(OPEN_RETRY_SECONDS)
        await database_sync_to_async(terminals.end_session)(self.session_id, terminals.NO_AGENT)

    async def disconnect(self, code):
        if self._opening is not None:
            self._opening.cancel()
        if self.session_id:
            await self.channel_layer.group_discard(
                terminals.browser_group(self.session_id), self.channel_name
            )
            await self.group_send(
                terminals.agent_group(self.session_id),
                {"type": "terminal.detached", "channel": self.channel_name},
            )

    async def receive(self, text_data=None, bytes_data=None):
        if text_data is None or len(text_data) > 2 * settings.TERMINAL_MAX_INPUT_BYTES:
            await self.close(code=1009 if text_data else 1003)
            return
        try:
            message = json.loads(text_data)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind == "input" and isinstance(message.get("data"), str):
            await self._to_agent({"type": "terminal.input", "data": message["data"]})
        elif kind == "resize":
            cols, rows = message.get("cols"), message.get("rows")
            if all(isinstance(v, int) and 1 <= v <= 1000 for v in (cols, rows)):
                await self._to_agent({"type": "terminal.resize", "cols": cols, "rows": rows})
        elif kind in ("ack", "resume") and _offset(message.get("offset")) is not None:
            await self._to_agent({"type": f"terminal.{kind}", "offset": message["offset"]})
        elif kind == "ping":
            await self.send(text_data='{"type":"pong"}')

    async def _to_agent(self, message: dict) -> None:
        if self._early is None:
            if not await self.send_peer(self.agent_channel, message, wait=True):
                # The agent's side is gone or stuck: hold input until a side answers again.
                self._early, self._early_bytes, self.agent_channel = [message], 0, None
                await self.group_send(
                    terminals.agent_group(self.session_id),
                    {"type": "terminal.attached", "channel": self.channel_name},
                )
            return
        self._early_bytes += len(message.get("data", ""))
        if self._early_bytes > settings.TERMINAL_MAX_INPUT_BYTES:
            await self.close(code=1008)  # pasting a book into a shell that is not there yet
            return
        self._early.append(message)

    # channel-layer messages ------------------------------------------------------------

    async def terminal_output(self, event):
        await self.send(bytes_data=event["frame"])

    async def terminal_ready(self, event):
        """The agent's socket is up (or answered our attach): its channel, for the hot path."""
        if self._opening is not None:
            self._opening.cancel()
            self._opening = None
        self.agent_channel = event["channel"]
        if not event.get("reply"):
            await self.send_peer(
                self.agent_channel,
                {"type": "terminal.attached", "channel": self.channel_name, "reply": True},
                wait=True,
            )
        early, self._early, self._early_bytes = self._early or [], None, 0
        for message in early:
            await self._to_agent(message)
        await self.send(text_data='{"type":"ready"}')

    async def terminal_ended(self, event):
        await self.send(
            text_data=json.dumps(
                {"type": "ended", "reason": event["reason"], "exit_code": event["exit_code"]}
            )
        )
        await self.close(code=ENDED)

    async def terminal_takeover(self, event):
        if event["channel"] != self.channel_name:
            await self.send(text_data='{"type":"taken_over"}')
            await self.close(code=TAKEN_OVER)


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


# --- the node agent's sockets -----------------------------------------------------------


@database_sync_to_async
def _node(scope):
    scheme, _, credential = scope_header(scope, b"authorization").partition(" ")
    if scheme != "Node":
        raise Unauthenticated("Expected 'Authorization: Node <credential>'.")
    return nodes.authenticate_agent(credential.strip())


class AgentControlConsumer(_Refusing):
    """``/ws/agent/v1/terminals/``: the node agent learns here which shells to open."""

    node = None

    async def connect(self):
        try:
            self.node = await _node(self.scope)
        except Unauthenticated as error:
            await self.refuse(error)
            return
        await self.channel_layer.group_add(terminals.node_group(self.node.pk), self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if self.node is not None:
            await self.channel_layer.group_discard(terminals.node_group(self.node.pk), self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        try:
            message = json.loads(text_data or "")
        except ValueError:
            return
        if (
            isinstance(message, dict)
            and message.get("type") == "hello"
            and isinstance(message.get("sessions"), list)
        ):
            await database_sync_to_async(terminals.agent_restarted)(self.node, message["sessions"][:1000])
            for ask in await database_sync_to_async(terminals.waiting_for_agent)(self.node):
                await self.terminal_open(ask)

    async def terminal_open(self, event):
        await self.send(
            text_data=json.dumps({**{k: v for k, v in event.items() if k != "type"}, "type": "open"})
        )


@database_sync_to_async
def _agent_session(node, session_id):
    session = terminals.agent_session(node, session_id)
    return (session, recordings.Recorder.load(session)) if session is not None else (None, None)


class AgentTerminalConsumer(_Refusing):
    """``/ws/agent/v1/terminal/{session}/``: one shell's output in, the browser's input out.

    It also records the session and watches its limits (idle timeout, maximum
    duration, no browser attached) and whether it was ended elsewhere."""

    session: TerminalSession | None = None
    recorder: recordings.Recorder | None = None
    _watch: asyncio.Task | None = None
    browser_channel: str | None = None  # the attached browser's socket, if any
    # The first output offset skipped because the browser's channel was full: asked of
    # the agent again at the next tick (the browser also asks, if more output follows).
    resend_from: int | None = None
    closing = False

    async def connect(self):
        try:
            node = await _node(self.scope)
        except Unauthenticated as error:
            await self.refuse(error)
            return
        self.session, self.recorder = await _agent_session(
            node, self.scope["url_route"]["kwargs"]["session_id"]
        )
        if self.session is None:
            await self.refuse(NotFound("No such open terminal session on this node."))
            return
        self.session_id = str(self.session.pk)
        self._flushing = asyncio.Lock()
        self.last_input = (self.session.last_input_at or self.session.created_at).timestamp()
        self._input_noted = time.monotonic()
        self.detached_since: float | None = None
        await self.channel_layer.group_add(terminals.agent_group(self.session_id), self.channel_name)
        await self.accept()
        self._watch = asyncio.create_task(self._watch_limits())
        await self.group_send(
            terminals.browser_group(self.session_id), {"type": "terminal.ready", "channel": self.channel_name}
        )

    async def disconnect(self, code):
        if self._watch is not None:
            self._watch.cancel()
        if self.session is not None:
            await self.channel_layer.group_discard(terminals.agent_group(self.session_id), self.channel_name)
            await self._flush()

    async def receive(self, text_data=None, bytes_data=None):
        if bytes_data is not None:
            if len(bytes_data) <= HEADER.size:
                return
            (offset,) = HEADER.unpack_from(bytes_data)
            self.recorder.output(offset, bytes_data[HEADER.size :])
            frame = {"type": "terminal.output", "frame": bytes_data}
            if not await self.send_peer(self.browser_channel, frame, wait=False) and self.resend_from is None:
                self.resend_from = offset
            if self.recorder.due():
                await self._flush_soon()
            return
        try:
            message = json.loads(text_data or "")
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("type") == "exit":
            code = message.get("code") if isinstance(message.get("code"), int) else None
            await self._end("the shell exited", exit_code=code)
        elif message.get("type") == "error":
            await self._end(str(message.get("message", "the node agent could not start the shell"))[:200])

    async def _ended_elsewhere(self, reason: str, exit_code: int | None) -> None:
        """The news of the end again, to the browser's socket and this one."""
        message = terminals.ended_message(reason, exit_code)
        await self.group_send(terminals.browser_group(self.session_id), message)
        await self.terminal_ended(message)

    async def _end(self, reason: str, exit_code: int | None = None) -> None:
        await self._flush()
        await database_sync_to_async(terminals.end_session)(self.session_id, reason, exit_code=exit_code)

    async def _flush(self) -> None:
        async with self._flushing:
            batch = self.recorder.take()
            await database_sync_to_async(recordings.save)(batch)

    async def _flush_soon(self) -> None:
        """Write the recording off the relay's path. While a write is under way the next
        chunk keeps growing, up to ``recordings.HELD_CHARS``: only then does the relay
        wait for the database (so what a session holds stays bounded)."""
        if self._flushing.locked():
            if not self.recorder.full():
                return
            await self._flushing.acquire()
            self._flushing.release()
        self._flush_task = asyncio.create_task(self._flush())

    async def _watch_limits(self) -> None:
        checked = time.monotonic()
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            if time.monotonic() - checked >= settings.TERMINAL_ENDED_CHECK_SECONDS:
                checked = time.monotonic()
                if ended := await database_sync_to_async(terminals.ended)(self.session_id):
                    await self._ended_elsewhere(*ended)
                    return
            now = timezone.now()
            session = self.session
            session.last_input_at = datetime.fromtimestamp(self.last_input, tz=UTC)
            reason = terminals.expiry(session, now)
            detached = self.detached_since is not None and (
                time.monotonic() - self.detached_since >= settings.TERMINAL_DETACHED_SECONDS
            )
            if reason is None and detached:
                reason = terminals.DETACHED
            if reason is not None:
                await self._end(reason)
                return
            if self.resend_from is not None and self.browser_channel is not None:
                await self.send(text_data=json.dumps({"type": "resume", "offset": self.resend_from}))
                self.resend_from = None
            if self.recorder.due():
                await self._flush()

    # channel-layer messages from the browser's socket ----------------------------------------

    async def terminal_input(self, event):
        self.last_input = time.time()
        if time.monotonic() - self._input_noted >= INPUT_NOTE_SECONDS:
            self._input_noted = time.monotonic()
            await database_sync_to_async(terminals.note_input)(self.session_id)
        await self.send(text_data=json.dumps({"type": "input", "data": event["data"]}))

    async def terminal_resize(self, event):
        self.recorder.resize(event["cols"], event["rows"])
        await self.send(
            text_data=json.dumps({"type": "resize", "cols": event["cols"], "rows": event["rows"]})
        )

    async def terminal_ack(self, event):
        await self.send(text_data=json.dumps({"type": "ack", "offset": event["offset"]}))

    async def terminal_resume(self, event):
        await self.send(text_data=json.dumps({"type": "resume", "offset": event["offset"]}))

    async def terminal_attached(self, event):
        """A browser's socket is up (a newer one takes over): output goes to it from now."""
        self.browser_channel = event["channel"]
        self.detached_since = None
        if not event.get("reply"):
            await self.send_peer(
                self.browser_channel,
                {"type": "terminal.ready", "channel": self.channel_name, "reply": True},
                wait=True,
            )

    async def terminal_detached(self, event):
        if event["channel"] == self.browser_channel:
            self.browser_channel = None
            self.detached_since = time.monotonic()

    async def terminal_ended(self, event):
        if self.closing:  # the news came twice: from the layer and from the database
            return
        self.closing = True
        await self.send(text_data='{"type":"close"}')
        await self.close(code=ENDED)
