"""The allocation's terminal pages: the terminal, its sessions with their
recordings, a replay, and the .cast download; for members who may manage the
allocation only. The admin's action ends a live session."""

from __future__ import annotations

import json

import pytest

from apps.access import recordings, terminals
from apps.access.models import TerminalSession
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from tests.support.members import member
from tests.support.pages import client_for
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


@pytest.fixture
def recorded(active_allocation, allocator):
    session = terminals.open_session(principals.for_user(allocator), active_allocation.pk, cols=80, rows=24)
    recorder = recordings.Recorder.load(session)
    recorder.output(0, b"$ echo recorded\r\nrecorded\r\n")
    recordings.save(recorder.take())
    terminals.end_session(session.pk, "the shell exited", exit_code=0)
    return TerminalSession.objects.get(pk=session.pk)


def urls(allocation, session=None) -> dict:
    base = f"/projects/{allocation.project_id}/allocations/{allocation.pk}/terminal/"
    found = {"terminal": base, "sessions": f"{base}sessions/"}
    if session is not None:
        found["replay"] = f"{base}sessions/{session.pk}/"
        found["cast"] = f"{base}sessions/{session.pk}/recording.cast"
    return found


def test_a_project_admin_gets_the_terminal_and_its_sessions(active_allocation, allocator, recorded):
    client = client_for(allocator)
    pages = urls(active_allocation, recorded)
    terminal = client.get(pages["terminal"])
    assert terminal.status_code == 200
    assert f'data-ws-path="/ws/allocations/{active_allocation.pk}/terminal/"' in terminal.text
    assert "vendor/xterm-6.0.0.js" in terminal.text
    listing = client.get(pages["sessions"])
    assert listing.status_code == 200
    assert f'data-session="{recorded.pk}"' in listing.text
    assert "the shell exited" in listing.text
    replay = client.get(pages["replay"])
    assert replay.status_code == 200
    assert "vendor/asciinema-player-3.18.0.min.js" in replay.text
    assert "'wasm-unsafe-eval'" in replay["Content-Security-Policy"]
    cast = client.get(pages["cast"])
    assert cast["Content-Type"] == "application/x-asciicast"
    lines = b"".join(cast.streaming_content).decode().splitlines()
    assert json.loads(lines[0])["version"] == 2
    assert json.loads(lines[1])[1:] == ["o", "$ echo recorded\r\nrecorded\r\n"]


def test_the_sessions_page_pages_through_every_session(active_allocation, allocator, recorded):
    earlier = [
        TerminalSession(
            allocation=active_allocation,
            tenant_id=recorded.tenant_id,
            project_id=recorded.project_id,
            node_id=recorded.node_id,
            username=recorded.username,
            runtime_user=recorded.runtime_user,
            state=TerminalSession.State.ENDED,
            idle_timeout_seconds=recorded.idle_timeout_seconds,
            max_duration_seconds=recorded.max_duration_seconds,
        )
        for _ in range(30)
    ]
    TerminalSession.objects.bulk_create(earlier)
    client = client_for(allocator)
    first = client.get(urls(active_allocation)["sessions"])
    assert first.text.count("data-session=") == 25
    assert "Page 1 of 2 · 31 total" in first.text
    second = client.get(urls(active_allocation)["sessions"] + "?page=2", HTTP_HX_REQUEST="true")
    assert second.text.count("data-session=") == 6
    assert "<html" not in second.text  # the table alone, swapped in by htmx


def test_the_overview_links_the_terminal_only_for_those_who_may_open_it(
    active_allocation, allocator, project
):
    detail = f"/projects/{active_allocation.project_id}/allocations/{active_allocation.pk}/"
    assert "Terminal sessions" in client_for(allocator).get(detail).text
    assert "Terminal sessions" not in client_for(member("viewer", project=project)).get(detail).text


@pytest.mark.parametrize("page", ["terminal", "sessions", "replay", "cast"])
def test_a_viewer_gets_403_and_other_projects_404(page, active_allocation, recorded, project, other_project):
    url = urls(active_allocation, recorded)[page]
    assert client_for(member("viewer", project=project)).get(url).status_code == 403
    assert client_for(member("project_admin", project=other_project)).get(url).status_code == 404


def test_an_operator_ends_a_live_session_from_the_admin(active_allocation, allocator, platform_admin):
    session = terminals.open_session(principals.for_user(allocator), active_allocation.pk, cols=80, rows=24)
    response = client_for(platform_admin).post(
        "/admin/access/terminalsession/",
        {"action": "end_sessions", "_selected_action": [str(session.pk)]},
    )
    assert response.status_code == 302
    session.refresh_from_db()
    assert session.state == TerminalSession.State.ENDED
    assert AuditEvent.objects.filter(action="terminal.end", actor=platform_admin.username).exists()
