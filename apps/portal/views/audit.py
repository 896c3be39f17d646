from __future__ import annotations

from django.core.paginator import Paginator
from django.views.decorators.http import require_safe

from apps.core.filters import cached_choices
from apps.portal.forms import AuditFilterForm
from apps.portal.htmx import render_page_or_fragment
from apps.portal.views.base import portal_view
from apps.tenancy import policy, services
from apps.tenancy.filters import AuditEventFilter
from apps.tenancy.models import Project, Tenant
from apps.tenancy.roles import Perm

EVENTS_PER_PAGE = 50
ACTION_SUGGESTIONS = 200
PROJECT_CHOICES = 500


@require_safe
@portal_view
def audit_log(request, principal):
    # The service refuses (403, audited) a caller who may read the trail nowhere.
    events = services.list_audit_events(principal)
    projects = list(
        policy.restrict(Project.objects.select_related("tenant"), principal, Perm.AUDIT_VIEW).order_by(
            "tenant__name", "name"
        )[:PROJECT_CHOICES]
    )
    form = AuditFilterForm(request.GET or None, projects=projects)
    if form.is_bound and form.is_valid():
        # The form's choices are valid filters: its dates become the API's from/to.
        events = AuditEventFilter(form.service_filters(), queryset=events).qs
    if form.errors:
        events = events.none()
    page = Paginator(events, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    # Names for the UUIDs events keep (not foreign keys: the trail outlives its objects).
    project_ids = {e.project_id for e in page if e.project_id}
    tenant_ids = {e.tenant_id for e in page if e.tenant_id}
    project_names = (
        dict(Project.objects.filter(pk__in=project_ids).values_list("pk", "name")) if project_ids else {}
    )
    tenant_names = (
        dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "name")) if tenant_ids else {}
    )
    rows = [
        {
            "event": e,
            "project_name": project_names.get(e.project_id),
            "tenant_name": tenant_names.get(e.tenant_id),
        }
        for e in page
    ]
    actions = cached_choices(
        services.list_audit_events(principal)
        .order_by("action")
        .values_list("action", flat=True)
        .distinct()[:ACTION_SUGGESTIONS]
    )
    context = {
        "form": form,
        "page_obj": page,
        "rows": rows,
        "action_suggestions": actions,
        "filtered": bool(form.is_bound and any(form.data.get(k) for k in form.fields)),
    }
    return render_page_or_fragment(
        request, "portal/audit.html", "portal/partials/audit_results.html", context
    )
