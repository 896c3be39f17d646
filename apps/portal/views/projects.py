from __future__ import annotations

import uuid

from django.contrib import messages
from django.core.paginator import Paginator
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_safe

from apps.core.errors import Forbidden
from apps.portal import queries
from apps.portal.context_processors import SESSION_PROJECT
from apps.portal.forms import ProjectForm
from apps.portal.htmx import hx_redirect, render_page_or_fragment
from apps.portal.views.base import filtered, portal_view, refusal_on
from apps.tenancy import services
from apps.tenancy.filters import ProjectFilter
from apps.tenancy.models import Project
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

PROJECTS_PER_PAGE = 25


@require_safe
@portal_view
def project_list(request, principal):
    projects = queries.projects_with_counts(principal)
    projects, filters = filtered(ProjectFilter, request, projects)
    page = Paginator(projects, PROJECTS_PER_PAGE).get_page(request.GET.get("page"))
    for project in page:
        # Decided from the grants in memory: no query per row.
        project.can_view_accounts = principal.can(Perm.SERVICE_ACCOUNT_VIEW, project.tenant_id, project.pk)
    context = {
        "page_obj": page,
        "tenant_filter": filters["tenant"],
        "can_create": _can_create_somewhere(principal),
    }
    return render_page_or_fragment(
        request, "portal/projects.html", "portal/partials/project_table.html", context
    )


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def project_create(request, principal):
    tenants = queries.creatable_tenants(principal)
    choices = list(tenants[:2])
    if not choices:
        # In a tenant (or none) without the role to create projects there.
        raise Forbidden("Only tenant administrators can create projects.")
    form = ProjectForm(
        request.POST or None, tenants=tenants, initial={"tenant": _preferred_tenant(request, tenants)}
    )
    if request.method == "POST" and form.is_valid():
        with refusal_on(form) as refused:
            result = services.create_project(
                principal,
                form.cleaned_data["tenant"],
                project_id=form.cleaned_data["project_id"],
                name=form.cleaned_data["name"],
            )
        if not refused:
            if result.created:
                messages.success(request, f"Project {result.obj.name} created.")
                return hx_redirect(request, reverse("project_detail", args=[result.obj.pk]))
            # The service is idempotent per id (for CCP retries); in a form a taken id is a mistake.
            form.add_error("project_id", "A project with this id already exists in this tenant.")
    context = {"form": form, "single_tenant": choices[0] if len(choices) == 1 else None}
    return render_page_or_fragment(
        request, "portal/project_new.html", "portal/partials/project_form.html", context
    )


def _preferred_tenant(request, tenants):
    """The switcher's current project's tenant, when the caller may create projects there."""
    current = _uuid_or_none(request.session.get(SESSION_PROJECT))
    if current:
        found = (
            Project.objects.filter(pk=current, tenant__in=tenants).values_list("tenant_id", flat=True).first()
        )
        if found:
            return found
    return tenants.first()


def _can_create_somewhere(principal: Principal) -> bool:
    return any(Perm.PROJECT_CREATE in g.permissions and g.project_id is None for g in principal.grants)


def _uuid_or_none(value):
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None
