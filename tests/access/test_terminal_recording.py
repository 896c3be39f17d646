"""Terminal recordings are asciicast v2: a header, then timed output and resize
events holding each output byte once, however it was relayed; bounded in size;
deleted after the project's retention, and the session's row a year after it ended."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.access import recordings, terminals
from apps.access.models import TerminalPolicy, TerminalRecordingChunk, TerminalSession
from apps.access.tasks import delete_expired_recordings
from apps.tenancy import principal as principals

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(active_allocation, allocator):
    return terminals.open_session(principals.for_user(allocator), active_allocation.pk, cols=90, rows=20)


def record(session, frames, resize=None) -> list:
    recorder = recordings.Recorder.load(session)
    for index, (offset, data) in enumerate(frames):
        recorder.output(offset, data)
        if resize and index == resize[0]:
            recorder.resize(*resize[1:])
    recordings.save(recorder.take())
    session.refresh_from_db()
    return [json.loads(line) for line in "".join(recordings.cast(session)).splitlines()]


def test_a_recording_is_asciicast_v2_with_each_byte_once(session):
    text = "héllo wörld ✓\r\n".encode() * 3
    # Split inside multi-byte characters, and sent again in part after a reconnect.
    frames = [(0, text[:2]), (2, text[2:10]), (0, text[:12]), (12, text[12:30]), (25, text[25:])]
    header, *events = record(session, frames, resize=(2, 120, 40))
    assert header["version"] == 2
    assert (header["width"], header["height"]) == (90, 20)
    assert isinstance(header["timestamp"], int)
    assert all(len(event) == 3 and event[1] in ("o", "r") for event in events)
    times = [event[0] for event in events]
    assert times == sorted(times)
    assert "".join(event[2] for event in events if event[1] == "o") == text.decode()
    assert ["r", "120x40"] in [event[1:] for event in events]
    assert session.recorded_bytes == session.output_bytes == len(text)


def test_a_second_portal_process_goes_on_where_the_first_stopped(session):
    record(session, [(0, b"first ")])
    _, *events = record(session, [(0, b"first "), (6, b"second")])
    assert "".join(event[2] for event in events) == "first second"
    assert list(TerminalRecordingChunk.objects.filter(session=session).values_list("seq", flat=True)) == [
        0,
        1,
    ]


def test_a_recording_stops_at_its_limit_with_a_marker(session, settings):
    settings.TERMINAL_RECORDING_MAX_CHARS = 2000
    frames = [(i * 100, b"x" * 100) for i in range(100)]
    _, *events = record(session, frames)
    assert events[-1][1] == "m"
    assert "limit" in events[-1][2]
    assert session.recording_truncated
    assert session.recording_chars <= 2000 + len(json.dumps(events[-1])) + 1
    assert session.output_bytes == 10_000


def test_recordings_are_deleted_after_their_projects_retention(session, project, other_project):
    TerminalPolicy.objects.create(project=project, recording_retention_days=7)
    record(session, [(0, b"kept a while")])
    terminals.end_session(session.pk, "done")
    now = timezone.now()
    assert recordings.delete_expired(now + timedelta(days=6)) == 0
    assert recordings.delete_expired(now + timedelta(days=8)) == 1
    session.refresh_from_db()
    assert session.recording_deleted
    assert not TerminalRecordingChunk.objects.filter(session=session).exists()


def test_ended_sessions_go_a_year_on_once_their_recordings_have(
    session, active_allocation, allocator, project
):
    """The hourly recordings sweep also deletes the rows of sessions ended over
    TERMINAL_SESSION_RETENTION_DAYS (365) ago; a live session, a recent one and one
    whose project still keeps its recording stay."""
    opener = principals.for_user(allocator)
    recent, live = (terminals.open_session(opener, active_allocation.pk, cols=80, rows=24) for _ in range(2))
    for ended, days_ago in ((session, 400), (recent, 300)):
        record(ended, [(0, b"who was here")])
        terminals.end_session(ended.pk, "done")
        TerminalSession.objects.filter(pk=ended.pk).update(ended_at=timezone.now() - timedelta(days=days_ago))
    TerminalSession.objects.filter(pk=live.pk).update(created_at=timezone.now() - timedelta(days=400))
    policy = TerminalPolicy.objects.create(project=project, recording_retention_days=3650)

    assert delete_expired_recordings() == 0
    assert TerminalRecordingChunk.objects.filter(session=session).exists()

    policy.recording_retention_days = 30
    policy.save()
    assert delete_expired_recordings() == 3  # two recordings, one session
    assert set(TerminalSession.objects.values_list("pk", flat=True)) == {recent.pk, live.pk}
    assert TerminalSession.objects.get(pk=recent.pk).recording_deleted


def test_a_session_the_agent_never_opened_is_ended_by_the_sweep(session):
    assert terminals.end_expired(timezone.now() + timedelta(minutes=1)) == 1
    session.refresh_from_db()
    assert session.end_reason == terminals.NO_AGENT


def test_expired_sessions_are_ended_by_the_sweep(session, active_allocation):
    assert terminals.agent_session(active_allocation.node, session.pk) is not None  # the agent took it
    now = timezone.now()
    assert terminals.end_expired(now + timedelta(minutes=5)) == 0
    later = now + timedelta(seconds=session.idle_timeout_seconds + 1)
    assert terminals.end_expired(later) == 1
    session.refresh_from_db()
    assert session.state == TerminalSession.State.ENDED
    assert session.end_reason == terminals.IDLE
