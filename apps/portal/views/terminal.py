"""An allocation's web terminal (xterm.js over ``/ws/allocations/{a}/terminal/``), its
terminal sessions, and their recordings replayed with asciinema-player. Members who
may manage the allocation only: a viewer gets 403, anyone outside the project 404.
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from apps.access import recordings, services, terminals
from apps.access.models import TerminalSession
from apps.allocations.models import Allocation
from apps.core.middleware import default_csp
from apps.portal.context_processors import remember_project
from apps.portal.htmx import render_page_or_fragment
from apps.portal.views.allocations import allocation_tabs
from apps.portal.views.base import portal_view
from apps.tenancy import policy
from apps.tenancy.roles import Perm

SESSIONS_PER_PAGE = 25


def _allocation_page(principal, pk, allocation_pk) -> tuple[Allocation, dict]:
    """The allocation (one the caller may manage) and what each terminal page shows of it."""
    allocation = services.get_allocation(principal, pk, allocation_pk)
    tabs = allocation_tabs(allocation, can_manage=True)
    return allocation, {"project": allocation.project, "allocation": allocation, "tabs": tabs}


def _with_inline_styles(request, response, extra_scripts: str = ""):
    """xterm.js and asciinema-player style their cells through <style> elements they
    create; asciinema-player also compiles its terminal emulator from WebAssembly."""
    csp = default_csp(request).replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
    if extra_scripts:
        csp = csp.replace("script-src ", f"script-src {extra_scripts} ", 1)
    response.csp = csp
    return response


@require_safe
@portal_view
def terminal(request, principal, pk, allocation_pk):
    allocation, context = _allocation_page(principal, pk, allocation_pk)
    remember_project(request, allocation.project)
    context["active"] = allocation.state == Allocation.State.ACTIVE
    context["ws_path"] = f"/ws/allocations/{allocation.pk}/terminal/"
    return _with_inline_styles(request, render(request, "portal/terminal.html", context))


def _sessions(principal, allocation):
    return (
        terminals.manageable_sessions(principal)
        .filter(allocation=allocation)
        .select_related("node")
        .order_by("-created_at")
    )


@require_safe
@portal_view
def terminal_sessions(request, principal, pk, allocation_pk):
    allocation, context = _allocation_page(principal, pk, allocation_pk)
    remember_project(request, allocation.project)
    sessions = Paginator(_sessions(principal, allocation), SESSIONS_PER_PAGE)
    context["page_obj"] = sessions.get_page(request.GET.get("page"))
    return render_page_or_fragment(
        request, "portal/terminal_sessions.html", "portal/partials/terminal_session_table.html", context
    )


def _session(principal, allocation, session_pk) -> TerminalSession:
    return policy.get_object(
        TerminalSession.objects.filter(allocation=allocation).select_related("node"),
        principal,
        Perm.ALLOCATION_MANAGE,
        pk=session_pk,
    )


@require_safe
@portal_view
def terminal_replay(request, principal, pk, allocation_pk, session_pk):
    allocation, context = _allocation_page(principal, pk, allocation_pk)
    context["session"] = _session(principal, allocation, session_pk)
    return _with_inline_styles(
        request, render(request, "portal/terminal_replay.html", context), extra_scripts="'wasm-unsafe-eval'"
    )


@require_safe
@portal_view
def terminal_recording(request, principal, pk, allocation_pk, session_pk):
    allocation = services.get_allocation(principal, pk, allocation_pk)
    session = _session(principal, allocation, session_pk)
    if session.recording_deleted:
        raise Http404("This recording was deleted at the end of its retention.")
    response = StreamingHttpResponse(recordings.cast(session), content_type=recordings.CONTENT_TYPE)
    response["Content-Disposition"] = f'attachment; filename="terminal-{session.pk}.cast"'
    response["Cache-Control"] = "no-store"
    return response
