from __future__ import annotations

import uuid

from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from apps.metering import selectors as pricing
from apps.monitoring.alerts import services as alerts
from apps.monitoring.models import Alert
from apps.portal import queries
from apps.portal.context_processors import SESSION_PROJECT
from apps.portal.views.allocations import BADGES as ALLOCATION_BADGES
from apps.portal.views.base import may, portal_view
from apps.portal.views.instances import BADGES as INSTANCE_BADGES
from apps.proxy import routes as proxy_routes
from apps.runtime.models import AppInstance
from apps.tenancy import policy, services
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant
from apps.tenancy.roles import Perm

State = AppInstance.State

DASHBOARD_TENANTS = 24
PROJECTS_PER_TENANT = 6
DASHBOARD_ALERTS = 5
DASHBOARD_TILES = 12  # of each kind; the project pages list them all
RECENT_EVENTS = 6
# Rows read to fill ``RECENT_EVENTS`` once repeated rows are folded: a browser opening
# apps issues a proxy session each time, which would otherwise fill the panel.
RECENT_SCAN = 60
FOLDED_ACTIONS = ("proxy.session.issue",)


@require_safe
@portal_view
def dashboard(request, principal):
    tenants = list(queries.visible_tenants(principal)[: DASHBOARD_TENANTS + 1])
    shown = tenants[:DASHBOARD_TENANTS]
    projects_by_tenant: dict = {t.pk: [] for t in shown}
    for project in queries.projects_with_counts(principal).filter(tenant__in=[t.pk for t in shown]):
        projects_by_tenant[project.tenant_id].append(project)
    cards = [
        {
            "tenant": t,
            "projects": projects_by_tenant[t.pk][:PROJECTS_PER_TENANT],
            "more_projects": max(0, len(projects_by_tenant[t.pk]) - PROJECTS_PER_TENANT),
            "project_count": len(projects_by_tenant[t.pk]),
            "usage": principal.can(Perm.USAGE_VIEW, t.pk, None),
        }
        for t in shown
    ]
    stats = {
        "tenants": policy.restrict(Tenant.objects.all(), principal, Perm.TENANT_VIEW).count(),
        "projects": queries.visible_projects(principal).count(),
        "members": policy.restrict(Membership.objects.all(), principal, Perm.MEMBER_VIEW)
        .values("user")
        .distinct()
        .count(),
    }
    if may(principal, Perm.SERVICE_ACCOUNT_VIEW):
        stats["service_accounts"] = policy.restrict(
            ServiceAccount.objects.filter(revoked_at__isnull=True), principal, Perm.SERVICE_ACCOUNT_VIEW
        ).count()
    firing = None
    if may(principal, Perm.ALERT_VIEW):
        firing = list(alerts.visible_alerts(principal, state=Alert.State.FIRING)[:DASHBOARD_ALERTS])
    recent = None
    if may(principal, Perm.AUDIT_VIEW):
        recent = fold_repeats(services.list_audit_events(principal)[:RECENT_SCAN])[:RECENT_EVENTS]
    projects = [project for card in cards for project in projects_by_tenant[card["tenant"].pk]]
    return render(
        request,
        "portal/dashboard.html",
        {
            "principal": principal,
            "cards": cards,
            "more_tenants": len(tenants) > DASHBOARD_TENANTS,
            "stats": stats,
            "recent_events": recent,
            "firing_alerts": firing,
            "usage_charts": any(card["usage"] for card in cards),
            "allocate_in": _allocate_in(principal, projects, request),
            **_running(principal),
        },
    )


def _running(principal) -> dict:
    """The tiles of what the caller has now: live allocations with what they have cost
    so far (priced by metering, as the billing export prices), and live app instances
    with the endpoint their Open button launches. A fixed number of queries."""
    allocations = list(queries.live_allocations(principal)[: DASHBOARD_TILES + 1])
    instances = list(queries.live_instances(principal)[: DASHBOARD_TILES + 1])
    shown_allocations, shown_instances = allocations[:DASHBOARD_TILES], instances[:DASHBOARD_TILES]
    costs = pricing.accrued(shown_allocations)
    for allocation in shown_allocations:
        ALLOCATION_BADGES.decorate(allocation).accrued = costs[allocation.pk]
    endpoints = proxy_routes.first_endpoints(shown_instances)
    for instance in shown_instances:
        instance.tone = INSTANCE_BADGES.tone(instance.state)
        instance.open_endpoint = endpoints.get(instance.pk) if instance.state == State.RUNNING else None
    return {
        "running_allocations": shown_allocations,
        "more_allocations": len(allocations) > DASHBOARD_TILES,
        "running_instances": shown_instances,
        "more_instances": len(instances) > DASHBOARD_TILES,
    }


def _allocate_in(principal, projects: list[Project], request) -> Project | None:
    """Where the dashboard's "Allocate nodes" leads: the current project when the caller
    may allocate there, else the first project where they may."""
    allowed = [p for p in projects if principal.can(Perm.ALLOCATION_MANAGE, p.tenant_id, p.pk)]
    current = request.session.get(SESSION_PROJECT)
    return next((p for p in allowed if str(p.pk) == current), allowed[0] if allowed else None)


def fold_repeats(events) -> list:
    """The events newest first, with a run of the same ``FOLDED_ACTIONS`` row (same
    actor, target and outcome) shown once, its ``repeats`` counted."""
    folded: list = []
    for event in events:
        last = folded[-1] if folded else None
        if (
            last is not None
            and event.action in FOLDED_ACTIONS
            and (event.action, event.actor, event.target_id, event.outcome)
            == (last.action, last.actor, last.target_id, last.outcome)
        ):
            last.repeats += 1
            continue
        event.repeats = 1
        folded.append(event)
    return folded


@require_POST
@portal_view
def switch_project(request, principal):
    """The switcher: remember the chosen project (one the caller may see) and open it."""
    chosen = request.POST.get("project", "")
    if not chosen:
        request.session.pop(SESSION_PROJECT, None)
        return HttpResponseRedirect(reverse("dashboard"))
    try:
        pk = uuid.UUID(chosen)
    except ValueError:
        raise Http404("No such project.") from None
    project = policy.get_object(Project.objects.all(), principal, Perm.PROJECT_VIEW, pk=pk)
    request.session[SESSION_PROJECT] = str(project.pk)
    return HttpResponseRedirect(reverse("project_detail", args=[project.pk]))
