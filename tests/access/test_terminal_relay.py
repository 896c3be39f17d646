"""The web terminal end to end without a browser: the portal under uvicorn, a real
node agent process holding a real PTY, and a client speaking terminal.js's protocol."""

from __future__ import annotations

import re

import pytest

from apps.access.models import TerminalSession
from apps.core.models import AuditEvent
from tests.support.agent import running_agent
from tests.support.processes import wait_for
from tests.support.terminal import Terminal

# Real agents call a live server: SQLite locks its tables under them (the embedded
# default's terminal is in tests/ops/test_make_run_path.py instead).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production]


@pytest.fixture
def agent(portal, active_allocation, tmp_path):
    with running_agent(portal.url, active_allocation.node, tmp_path) as process:
        yield process


def test_a_command_typed_in_the_terminal_runs_in_a_shell_on_the_node(
    portal, agent, active_allocation, allocator
):
    terminal = Terminal.open(portal, active_allocation, allocator, cols=100, rows=30)
    try:
        terminal.type("echo hello-$((6*7))\r")
        terminal.expect(b"hello-42")
        terminal.type("tput cols; tput lines\r")
        terminal.read_until(lambda out: b"100\r\n30" in out)
        terminal.resize(132, 40)
        terminal.type("tput cols\r")
        terminal.expect(b"\r132\r\n")
    finally:
        terminal.close()
    session = TerminalSession.objects.get(pk=terminal.session_id)
    assert session.username == allocator.username
    assert AuditEvent.objects.filter(action="terminal.connect", target_id=str(session.pk)).exists()


def test_a_dropped_socket_resumes_with_nothing_lost_or_repeated(portal, agent, active_allocation, allocator):
    terminal = Terminal.open(portal, active_allocation, allocator)
    try:
        terminal.type("for i in $(seq 1 60000); do echo line-$i; done; echo all-$((1+1))-done\r")
        terminal.expect(b"line-100\r\n")
        terminal.drop()
        terminal.connect()
        output = terminal.expect(b"all-2-done")
    finally:
        terminal.close()
    lines = [match.group(1) for match in re.finditer(rb"(?m)\bline-(\d+)\r$", output)]
    assert lines == [str(i).encode() for i in range(1, 60001)]


def test_the_shell_exiting_ends_the_session_and_its_recording_holds_the_output(
    portal, agent, active_allocation, allocator
):
    terminal = Terminal.open(portal, active_allocation, allocator)
    terminal.type("echo recorded-$((1+1)); exit 3\r")
    assert terminal.wait_closed() == 4000
    session = wait_for(
        lambda: TerminalSession.objects.filter(pk=terminal.session_id, state="ended").first(), timeout=10
    )
    assert session.exit_code == 3
    assert AuditEvent.objects.filter(action="terminal.disconnect", target_id=str(session.pk)).exists()
