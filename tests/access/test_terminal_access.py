"""Who may open a terminal, and what closes one: the socket's handshake answers with
the contract's statuses, and revoked membership, logout, release, the tenant's
suspension and an operator end an open terminal at once (the portal and a real node
agent, no browser). A suspended tenant opens none."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from apps.access import terminals
from apps.access.models import TerminalSession
from apps.allocations import services as allocations
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership
from tests.factories import AllocationFactory
from tests.support.agent import running_agent
from tests.support.members import member
from tests.support.proxy import login_session
from tests.support.terminal import Terminal, portal_headers, socket_url

# Real agents call a live server: SQLite locks its tables under them (the embedded
# default's terminal is in tests/ops/test_make_run_path.py instead).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production]


def handshake(portal, allocation_id, user=None, **query) -> int:
    """The status the terminal socket's handshake answers (101 when accepted)."""
    session_key = login_session(user).session_key if user else "none"
    try:
        with connect(
            socket_url(portal, allocation_id, **query),
            additional_headers=portal_headers(portal, session_key),
            open_timeout=10,
        ):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def test_a_viewer_is_refused_403_and_others_404(portal, active_allocation, project, other_project):
    viewer = member("viewer", project=project)
    other_admin = member("project_admin", project=other_project)
    elsewhere = AllocationFactory()
    assert handshake(portal, active_allocation.pk, viewer) == 403
    assert handshake(portal, active_allocation.pk, other_admin) == 404
    assert handshake(portal, elsewhere.pk, member("project_admin", project=project)) == 404
    assert handshake(portal, active_allocation.pk) == 401
    assert not TerminalSession.objects.exists()
    assert AuditEvent.objects.filter(actor=viewer.username, outcome="denied").exists()


def test_bad_sizes_and_foreign_sessions_are_refused(portal, active_allocation, allocator, project):
    assert handshake(portal, active_allocation.pk, allocator, cols=0) == 400
    assert handshake(portal, active_allocation.pk, allocator, cols="wide") == 400
    mine = terminals.open_session(principals.for_user(allocator), active_allocation.pk, cols=80, rows=24)
    colleague = member("project_admin", project=project)
    # Another member may not take over someone's shell, nor may anyone resume an unknown id.
    assert handshake(portal, active_allocation.pk, colleague, session=mine.pk, offset=0) == 404
    assert handshake(portal, active_allocation.pk, allocator, session="not-a-uuid", offset=0) == 400


def test_a_terminal_needs_an_active_allocation(portal, project, allocator):
    pending = AllocationFactory(project=project, state="PENDING")
    assert handshake(portal, pending.pk, allocator) == 409


def test_a_suspended_tenant_opens_no_terminal(portal, active_allocation, allocator, tenant, platform_admin):
    tenancy.suspend_tenant(principals.for_user(platform_admin), tenant, "unpaid")
    assert handshake(portal, active_allocation.pk, allocator) == 409
    assert not TerminalSession.objects.exists()


def test_an_agent_socket_needs_the_nodes_credential(portal, active_allocation):
    base = portal.url.replace("http://", "ws://")
    for headers in ({}, {"Authorization": "Node not-the-credential"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(f"{base}/ws/agent/v1/terminals/", additional_headers=headers, open_timeout=10)
        assert refused.value.response.status_code == 401


def test_a_terminal_asked_for_while_the_agent_was_away_opens_when_it_connects(
    portal, active_allocation, allocator, tmp_path
):
    # The browser's socket goes before the agent comes: only the agent's own connection
    # can bring the ask, since the page, reloaded, resumes the session and asks nothing.
    terminal = Terminal.open(portal, active_allocation, allocator)
    terminal.drop()
    with running_agent(portal.url, active_allocation.node, tmp_path):
        try:
            terminal.connect()
            terminal.type("echo up-$((2+3))\r")
            terminal.expect(b"up-5")
        finally:
            terminal.close()


@pytest.fixture
def open_terminal(portal, active_allocation, allocator, tmp_path, settings):
    # The agent socket's own re-read of the session is off (a test that needs it turns
    # it on), so a terminal that closes was closed by the news of its end.
    settings.TERMINAL_ENDED_CHECK_SECONDS = 3600
    with running_agent(portal.url, active_allocation.node, tmp_path):
        terminal = Terminal.open(portal, active_allocation, allocator)
        terminal.type("echo up-$((2+3))\r")
        terminal.expect(b"up-5")
        yield terminal
        terminal.close()


def _ended(terminal) -> TerminalSession:
    return TerminalSession.objects.get(pk=terminal.session_id)


def test_revoked_membership_closes_the_terminal(open_terminal, allocator):
    Membership.objects.filter(user=allocator).delete()
    assert open_terminal.wait_closed() == 4000
    assert _ended(open_terminal).end_reason == terminals.REVOKED


def test_a_demotion_to_viewer_closes_the_terminal(open_terminal, allocator):
    Membership.objects.filter(user=allocator).update(role="viewer")
    # An update() sends no signal: the role change as the services make it, with save().
    for membership in Membership.objects.filter(user=allocator):
        membership.save()
    assert open_terminal.wait_closed() == 4000


def test_logout_closes_the_terminal_it_opened(open_terminal, allocator):
    browser = Client()
    browser.cookies["sessionid"] = open_terminal.session_key
    assert browser.post("/accounts/logout/").status_code in (200, 302)
    assert open_terminal.wait_closed() == 4000
    assert _ended(open_terminal).end_reason == terminals.LOGGED_OUT


def test_release_closes_the_terminal(open_terminal, active_allocation, allocator):
    allocations.release(principals.for_user(allocator), active_allocation)
    assert open_terminal.wait_closed() == 4000
    assert _ended(open_terminal).end_reason == terminals.RELEASED


def test_suspending_the_tenant_closes_the_terminal(open_terminal, tenant, platform_admin):
    tenancy.suspend_tenant(principals.for_user(platform_admin), tenant, "unpaid")
    assert open_terminal.wait_closed() == 4000
    assert _ended(open_terminal).end_reason == terminals.SUSPENDED


def test_an_operator_ends_a_session_and_it_is_audited(open_terminal, platform_admin):
    session = TerminalSession.objects.get(pk=open_terminal.session_id)
    assert terminals.end_by_operator(principals.for_user(platform_admin), session)
    assert open_terminal.wait_closed() == 4000
    assert AuditEvent.objects.filter(action="terminal.end", actor=platform_admin.username).exists()
    disconnect = AuditEvent.objects.get(action="terminal.disconnect", target_id=str(session.pk))
    assert disconnect.details["reason"] == f"ended by {platform_admin.username}"


def test_an_end_whose_news_the_channel_layer_lost_still_closes_the_terminal(open_terminal, settings):
    # Ended in the database while the channel layer could not carry the news (a Redis
    # outage): the agent's socket reads it there and closes both sockets.
    settings.TERMINAL_ENDED_CHECK_SECONDS = 1.0
    TerminalSession.objects.filter(pk=open_terminal.session_id).update(
        state=TerminalSession.State.ENDED, ended_at=timezone.now(), end_reason="ended by an operator"
    )
    assert open_terminal.wait_closed() == 4000
