"""The web terminal's operations: open, resume and end sessions, each checked and
audited; what ends them (revoked membership, logout, release, timeouts, an
operator); the sessions a caller may list.

A session's sockets (apps/access/consumers.py) find each other through
channel-layer groups named here; ending a session tells both sides through them,
so a terminal closes wherever its sockets are served, within a round trip.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.access.models import TerminalPolicy, TerminalSession
from apps.allocations.models import Allocation, Node
from apps.core import audit, bounds
from apps.core.broadcast import after_commit
from apps.core.errors import InvalidState, NotFound, Unavailable, ValidationFailed
from apps.tenancy import policy
from apps.tenancy import services as tenancy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

CONNECT = "terminal.connect"
RESUME = "terminal.resume"
DISCONNECT = "terminal.disconnect"
END = "terminal.end"

Reason = str
REVOKED: Reason = "access revoked"
LOGGED_OUT: Reason = "signed out"
RELEASED: Reason = "allocation released"
SUSPENDED: Reason = "tenant suspended"
IDLE: Reason = "idle timeout"
MAX_DURATION: Reason = "maximum duration reached"
DETACHED: Reason = "no browser attached"
NO_AGENT: Reason = "the node agent did not open the terminal"
AGENT_LOST: Reason = "the node agent restarted"


# --- channel-layer groups -------------------------------------------------------------


def browser_group(session_id) -> str:
    return f"terminal.{session_id}.browser"


def agent_group(session_id) -> str:
    return f"terminal.{session_id}.agent"


def node_group(node_id) -> str:
    return f"terminal.node.{node_id}"


def login_digest(session_key: str | None) -> str:
    """What a terminal keeps of the browser session that opened it (never the key)."""
    return hashlib.sha256(session_key.encode()).hexdigest() if session_key else ""


# --- policy ---------------------------------------------------------------------------


def policy_for(project_id) -> TerminalPolicy:
    """The project's terminal policy, or the defaults (unsaved) when it has none."""
    return TerminalPolicy.objects.filter(project_id=project_id).first() or TerminalPolicy(
        project_id=project_id
    )


def _managed_allocation(principal: Principal, allocation_id) -> Allocation:
    """404 outside the caller's scope, 403 for a member who may only view it."""
    return policy.get_object(
        Allocation.objects.select_related("node", "flavor", "tenant"),
        principal,
        Perm.ALLOCATION_VIEW,
        Perm.ALLOCATION_MANAGE,
        pk=allocation_id,
    )


def manageable_sessions(principal: Principal) -> QuerySet[TerminalSession]:
    """The sessions (and so the recordings) the caller may see: those of allocations it manages."""
    return policy.restrict(TerminalSession.objects.all(), principal, Perm.ALLOCATION_MANAGE)


# --- open / resume ----------------------------------------------------------------------


def open_session(
    principal: Principal, allocation_id, *, cols: int, rows: int, login_session: str = ""
) -> TerminalSession:
    """A new shell on the allocation's node, asked of its agent once the caller's socket is up."""
    allocation = _managed_allocation(principal, allocation_id)
    if allocation.state != Allocation.State.ACTIVE:
        raise InvalidState(f"The allocation is {allocation.state}: a terminal needs an ACTIVE allocation.")
    tenancy.require_not_suspended(allocation.tenant)
    if not allocation.node.credential_hash:
        raise Unavailable("The node's agent has not enrolled yet.", retry_after=10)
    limits = policy_for(allocation.project_id)
    limit = settings.TERMINAL_MAX_LIVE_PER_ALLOCATION
    with transaction.atomic():
        bounds.require_room(
            allocation,
            TerminalSession.objects.filter(allocation=allocation, state__in=TerminalSession.LIVE_STATES),
            limit,
            resource="terminals",
            message=f"This allocation already has {limit} terminals open.",
        )
        session = TerminalSession.objects.create(
            allocation=allocation,
            tenant_id=allocation.tenant_id,
            project_id=allocation.project_id,
            node_id=allocation.node_id,
            user=principal.user,
            username=principal.name,
            runtime_user=allocation.flavor.runtime_user,
            login_session=login_session,
            cols=cols,
            rows=rows,
            idle_timeout_seconds=limits.idle_timeout_seconds,
            max_duration_seconds=limits.max_duration_seconds,
            last_input_at=timezone.now(),
        )
        audit.record(
            principal,
            CONNECT,
            target=session,
            details={"allocation": str(allocation.pk), "runtime_user": session.runtime_user},
        )
    return session


def resume_session(
    principal: Principal, allocation_id, session_id, *, login_session: str = ""
) -> TerminalSession:
    """The caller's own live session on that allocation, for a browser coming back."""
    allocation = _managed_allocation(principal, allocation_id)
    if not _is_uuid(session_id):
        raise ValidationFailed(details={"session": ["Not a session id."]})
    session = TerminalSession.objects.filter(
        pk=session_id,
        allocation=allocation,
        user_id=getattr(principal.user, "pk", None),
        state__in=TerminalSession.LIVE_STATES,
    ).first()
    if session is None:
        raise NotFound("No such open terminal session.")
    if login_session and session.login_session != login_session:
        # Another browser of the same user takes the terminal over: its logout ends it now.
        TerminalSession.objects.filter(pk=session.pk).update(login_session=login_session)
    audit.record(principal, RESUME, target=session, details={"allocation": str(allocation.pk)})
    return session


# --- the agent's side ------------------------------------------------------------------------


def agent_session(node: Node, session_id) -> TerminalSession | None:
    """The live session the node's agent connects for, marked open; None when it is not
    this node's, or no longer live (the agent then ends its shell)."""
    session = (
        TerminalSession.objects.select_related("allocation")
        .filter(pk=session_id, node=node, state__in=TerminalSession.LIVE_STATES)
        .first()
    )
    if session is None or session.allocation.state != Allocation.State.ACTIVE:
        return None
    TerminalSession.objects.filter(pk=session.pk, state=TerminalSession.State.OPENING).update(
        state=TerminalSession.State.OPEN
    )
    return session


def open_request(session: TerminalSession) -> dict:
    """What asks the node's agent for the session's shell (through ``node_group``)."""
    return {
        "type": "terminal.open",
        "session": str(session.pk),
        "user": session.runtime_user,
        "cols": session.cols,
        "rows": session.rows,
    }


def waiting_for_agent(node: Node) -> list[dict]:
    """The asks of the node's sessions that still wait for its agent, for its control
    socket as it (re)connects: a session asked for while the socket was away opens now,
    not at the browser's next ask, and opens at all when the browser's socket has gone
    since (the page, reloaded, resumes it and asks nothing)."""
    settle = timezone.now() - timedelta(seconds=settings.TERMINAL_OPEN_TIMEOUT_SECONDS)
    waiting = TerminalSession.objects.filter(
        node=node, state=TerminalSession.State.OPENING, created_at__gte=settle
    ).order_by("created_at")
    return [open_request(session) for session in waiting]


def agent_restarted(node: Node, alive: list[str]) -> int:
    """The agent's control socket (re)connected with these shells alive: the node's other
    open sessions lost their shell with the previous agent."""
    settle = timezone.now() - timedelta(seconds=settings.TERMINAL_OPEN_TIMEOUT_SECONDS)
    lost = TerminalSession.objects.filter(
        node=node, state=TerminalSession.State.OPEN, created_at__lt=settle
    ).exclude(pk__in=[value for value in alive if _is_uuid(value)])
    return sum(end_session(pk, AGENT_LOST) for pk in lost.values_list("pk", flat=True))


def _is_uuid(value) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def note_input(session_id) -> None:
    TerminalSession.objects.filter(pk=session_id).update(last_input_at=timezone.now())


# --- ending -----------------------------------------------------------------------------------


def end_session(session_id, reason: Reason, *, actor=None, exit_code: int | None = None) -> bool:
    """End a live session (once: the state moves in the UPDATE); both sockets are told
    after commit. Returns whether this call ended it."""
    now = timezone.now()
    with transaction.atomic():
        changed = TerminalSession.objects.filter(pk=session_id, state__in=TerminalSession.LIVE_STATES).update(
            state=TerminalSession.State.ENDED, ended_at=now, end_reason=reason[:200], exit_code=exit_code
        )
        if not changed:
            return False
        session = TerminalSession.objects.get(pk=session_id)
        audit.record(
            actor,
            DISCONNECT,
            target=session,
            details={
                "reason": reason,
                "user": session.username,
                "allocation": str(session.allocation_id),
                "seconds": round((now - session.created_at).total_seconds(), 1),
                "output_bytes": session.output_bytes,
                **({"exit_code": exit_code} if exit_code is not None else {}),
            },
        )
        # The agent's socket also finds an end whose news the layer lost
        # (settings.TERMINAL_ENDED_CHECK_SECONDS).
        message = ended_message(reason, exit_code)
        after_commit(browser_group(session_id), message)
        after_commit(agent_group(session_id), message)
    return True


def ended_message(reason: str, exit_code: int | None) -> dict:
    """The channel-layer message that tells a session's sockets it ended."""
    return {"type": "terminal.ended", "reason": reason, "exit_code": exit_code}


def ended(session_id) -> tuple[str, int | None] | None:
    """The reason and exit code a session ended with, or None while it is live."""
    return (
        TerminalSession.objects.filter(pk=session_id, state=TerminalSession.State.ENDED)
        .values_list("end_reason", "exit_code")
        .first()
    )


def end_by_operator(principal: Principal, session: TerminalSession) -> bool:
    policy.require(principal, Perm.ALLOCATION_MANAGE, session)
    audit.record(principal, END, target=session, details={"user": session.username})
    return end_session(session.pk, f"ended by {principal.name}", actor=principal)


def _live(**lookup) -> QuerySet[TerminalSession]:
    return TerminalSession.objects.filter(state__in=TerminalSession.LIVE_STATES, **lookup)


def end_for_login(session_key: str | None) -> int:
    digest = login_digest(session_key)
    if not digest:
        return 0
    return sum(end_session(pk, LOGGED_OUT) for pk in _live(login_session=digest).values_list("pk", flat=True))


def end_for_allocation(allocation_id) -> int:
    return sum(
        end_session(pk, RELEASED) for pk in _live(allocation_id=allocation_id).values_list("pk", flat=True)
    )


def end_for_tenant(tenant_id) -> int:
    """A suspended tenant's terminals (decision 0078)."""
    return sum(end_session(pk, SUSPENDED) for pk in _live(tenant_id=tenant_id).values_list("pk", flat=True))


def end_unauthorized(user, now: Principal) -> int:
    """After a membership or account change: end the user's terminals on allocations
    the user, who may do ``now``, may no longer manage."""
    return sum(
        end_session(row["pk"], REVOKED)
        for row in _live(user=user).values("pk", "tenant_id", "project_id")
        if not now.can(Perm.ALLOCATION_MANAGE, row["tenant_id"], row["project_id"])
    )


def end_expired(now=None) -> int:
    """The beat's sweep: sessions past their maximum duration or idle timeout, and
    those the agent never picked up. The sockets end these themselves while they run;
    this catches sessions whose sockets are gone. Live sessions are few (a handful per
    allocation at most), so they are judged here rather than in SQL date arithmetic."""
    now = now or timezone.now()
    never = now - timedelta(seconds=2 * settings.TERMINAL_OPEN_TIMEOUT_SECONDS)
    ended = 0
    for session in _live().only(
        "pk", "state", "created_at", "last_input_at", "idle_timeout_seconds", "max_duration_seconds"
    ):
        reason = expiry(session, now)
        if reason is None and session.state == TerminalSession.State.OPENING and session.created_at < never:
            reason = NO_AGENT
        if reason is not None:
            ended += end_session(session.pk, reason)
    return ended


def expiry(session: TerminalSession, now) -> Reason | None:
    """Why the session's limits end it now, if they do."""
    if now - session.created_at >= timedelta(seconds=session.max_duration_seconds):
        return MAX_DURATION
    last_input = session.last_input_at or session.created_at
    if now - last_input >= timedelta(seconds=session.idle_timeout_seconds):
        return IDLE
    return None
