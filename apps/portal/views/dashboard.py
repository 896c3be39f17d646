from __future__ import annotations

import uuid

from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from apps.monitoring.alerts import services as alerts
from apps.monitoring.models import Alert
from apps.portal import queries
from apps.portal.context_processors import SESSION_PROJECT
from apps.portal.views.base import may, portal_view
from apps.tenancy import policy, services
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant
from apps.tenancy.roles import Perm

DASHBOARD_TENANTS = 24
PROJECTS_PER_TENANT = 6
DASHBOARD_ALERTS = 5


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
        recent = list(services.list_audit_events(principal)[:6])
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
        },
    )


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
