"""Terminal recordings in asciicast v2 (https://docs.asciinema.org/manual/asciicast/v2/):
a header line, then one JSON event line per output (``"o"``) or resize (``"r"``),
timed in seconds from the session's start.

The portal records what it relays, so a recording is what passed through the
platform whatever the node says. Output is addressed by byte offset, so bytes sent
again after a reconnect are recorded once. Events go to the database in chunks (at
most ``HELD_CHARS`` held in memory per session); a recording stops growing at
``TERMINAL_RECORDING_MAX_CHARS`` with a marker saying so. Input is not recorded:
it would keep every password typed at a prompt.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.access.models import TerminalPolicy, TerminalRecordingChunk, TerminalSession

FLUSH_CHARS = 256 * 1024
HELD_CHARS = 2 * 1024 * 1024  # at most this much waits for the database per session
FLUSH_SECONDS = 1.0
CONTENT_TYPE = "application/x-asciicast"
PRUNE_BATCH = 500


class Recorder:
    """The recording of one session while a portal process relays it."""

    def __init__(self, session: TerminalSession, next_seq: int):
        self.session_id = session.pk
        self.started = session.created_at.timestamp()
        self.recorded = session.recorded_bytes  # output bytes [0, recorded) are in the recording
        self.output_end = max(session.output_bytes, session.recorded_bytes)
        self.chars = session.recording_chars
        self.truncated = session.recording_truncated
        self.limit = settings.TERMINAL_RECORDING_MAX_CHARS
        self.seq = next_seq
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lines: list[str] = []
        self._pending = 0
        self._last_time = 0.0
        self._last_flush = time.monotonic()

    @classmethod
    def load(cls, session: TerminalSession) -> Recorder:
        last = TerminalRecordingChunk.objects.filter(session=session).aggregate(seq=Max("seq"))["seq"]
        return cls(session, 0 if last is None else last + 1)

    def output(self, offset: int, data: bytes) -> None:
        end = offset + len(data)
        self.output_end = max(self.output_end, end)
        if end <= self.recorded:
            return  # sent again after a reconnect: recorded already
        data = data[max(0, self.recorded - offset) :]
        self.recorded = end
        if not self.truncated:
            text = self._decoder.decode(data)
            if text:
                self._event("o", text)

    def resize(self, cols: int, rows: int) -> None:
        if not self.truncated:
            self._event("r", f"{cols}x{rows}")

    def _event(self, kind: str, data: str) -> None:
        now = max(self._last_time, round(time.time() - self.started, 6))
        self._last_time = now
        line = json.dumps([now, kind, data], ensure_ascii=False) + "\n"
        if self.chars + len(line) > self.limit:
            self.truncated = True
            line = json.dumps([now, "m", f"recording stopped at its limit of {self.limit} characters"]) + "\n"
        self._lines.append(line)
        self._pending += len(line)
        self.chars += len(line)

    def due(self) -> bool:
        return self._pending >= FLUSH_CHARS or (
            bool(self._pending) and time.monotonic() - self._last_flush >= FLUSH_SECONDS
        )

    def full(self) -> bool:
        return self._pending >= HELD_CHARS

    def take(self) -> dict:
        """What ``save`` writes next; the recorder starts a new chunk."""
        batch = {
            "session_id": self.session_id,
            "seq": self.seq,
            "events": "".join(self._lines),
            "recorded_bytes": self.recorded,
            "output_bytes": self.output_end,
            "chars": self.chars,
            "truncated": self.truncated,
        }
        if self._lines:
            self.seq += 1
        self._lines, self._pending = [], 0
        self._last_flush = time.monotonic()
        return batch


def save(batch: dict) -> None:
    with transaction.atomic():
        if batch["events"]:
            TerminalRecordingChunk.objects.create(
                session_id=batch["session_id"], seq=batch["seq"], events=batch["events"]
            )
        TerminalSession.objects.filter(pk=batch["session_id"]).update(
            recorded_bytes=batch["recorded_bytes"],
            output_bytes=batch["output_bytes"],
            recording_chars=batch["chars"],
            recording_truncated=batch["truncated"],
        )


def header(session: TerminalSession) -> dict:
    return {
        "version": 2,
        "width": session.cols,
        "height": session.rows,
        "timestamp": int(session.created_at.timestamp()),
        "title": f"{session.runtime_user}@{session.node.hostname}",
        "env": {"TERM": "xterm-256color"},
    }


def cast(session: TerminalSession) -> Iterator[str]:
    """The recording as an asciicast v2 file, chunk by chunk."""
    yield json.dumps(header(session)) + "\n"
    chunks = TerminalRecordingChunk.objects.filter(session=session).order_by("seq")
    yield from chunks.values_list("events", flat=True).iterator(chunk_size=20)


def delete_expired(now=None) -> int:
    """Delete the recordings older than their project's retention, then the sessions
    whose recording is gone that ended over ``TERMINAL_SESSION_RETENTION_DAYS`` ago;
    how many of both. Each runs in batches: a backlog goes over the next rounds."""
    now = now or timezone.now()
    retention = dict(TerminalPolicy.objects.values_list("project_id", "recording_retention_days"))
    default = TerminalPolicy.DEFAULT_RECORDING_RETENTION_DAYS
    shortest = min([default, *retention.values()])
    candidates = TerminalSession.objects.filter(
        state=TerminalSession.State.ENDED,
        recording_deleted=False,
        ended_at__lt=now - timedelta(days=shortest),
    ).values_list("pk", "project_id", "ended_at")[:PRUNE_BATCH]
    deleted = 0
    for pk, project_id, ended_at in candidates:
        if ended_at >= now - timedelta(days=retention.get(project_id, default)):
            continue
        with transaction.atomic():
            TerminalRecordingChunk.objects.filter(session_id=pk).delete()
            TerminalSession.objects.filter(pk=pk).update(recording_deleted=True)
        deleted += 1
    # A session whose project keeps recordings longer than this keeps its row until its
    # recording goes: the replay page needs it.
    sessions = TerminalSession.objects.filter(
        state=TerminalSession.State.ENDED,
        recording_deleted=True,
        ended_at__lt=now - timedelta(days=settings.TERMINAL_SESSION_RETENTION_DAYS),
    )
    _, removed = TerminalSession.objects.filter(pk__in=sessions.values("pk")[:PRUNE_BATCH]).delete()
    return deleted + removed.get(TerminalSession._meta.label, 0)
