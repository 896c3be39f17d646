from __future__ import annotations

from django.urls import reverse

from apps.core.models import AuditEvent
from apps.tenancy.models import Membership, Project
from tests.factories import ProjectFactory, TenantFactory
from tests.support.members import member
from tests.support.pages import HTMX


def test_tenant_admin_creates_a_project(tenant_admin, as_user, tenant):
    client = as_user(tenant_admin)
    response = client.post(
        reverse("project_create"), {"tenant": tenant.pk, "project_id": "cell-9", "name": "Cell 9"}
    )
    project = Project.objects.get(tenant=tenant, project_id="cell-9")
    assert response.status_code == 302
    assert response["Location"] == reverse("project_detail", args=[project.pk])
    assert AuditEvent.objects.filter(
        action="project.create", actor=tenant_admin.username, target_id=str(project.pk)
    ).exists()
    page = client.get(response["Location"])
    assert b"Project Cell 9 created." in page.content


def test_new_project_form_shows_field_errors(tenant_admin, as_user, tenant):
    response = as_user(tenant_admin).post(
        reverse("project_create"), {"tenant": tenant.pk, "project_id": "bad id!", "name": ""}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'class="field-error"' in body
    assert "This field is required." in body
    assert "1-64 characters" in body
    assert not Project.objects.filter(name="").exists()


def test_taken_project_id_is_a_form_error_not_a_silent_success(tenant_admin, as_user, project):
    response = as_user(tenant_admin).post(
        reverse("project_create"), {"tenant": project.tenant.pk, "project_id": "cell-1", "name": "Again"}
    )
    assert response.status_code == 200
    assert b"A project with this id already exists in this tenant." in response.content
    assert Project.objects.filter(project_id="cell-1").count() == 1


def test_a_full_tenant_is_a_form_error(tenant_admin, as_user, project, settings):
    settings.MAX_PROJECTS_PER_TENANT = 2
    ProjectFactory(tenant=project.tenant, project_id="cell-2")
    response = as_user(tenant_admin).post(
        reverse("project_create"), {"tenant": project.tenant.pk, "project_id": "cell-3", "name": "Cell 3"}
    )
    assert response.status_code == 200
    assert b"A tenant has at most 2 projects." in response.content
    assert not Project.objects.filter(project_id="cell-3").exists()


def test_tenant_choice_is_limited_to_tenants_the_user_administers(tenant_admin, as_user, tenant):
    elsewhere = TenantFactory(name="Elsewhere")
    response = as_user(tenant_admin).post(
        reverse("project_create"), {"tenant": elsewhere.pk, "project_id": "x", "name": "X"}
    )
    assert response.status_code == 200
    assert b"Select a valid choice" in response.content
    assert not Project.objects.filter(tenant=elsewhere).exists()


def test_htmx_create_answers_hx_redirect(tenant_admin, as_user, tenant):
    response = as_user(tenant_admin).post(
        reverse("project_create"), {"tenant": tenant.pk, "project_id": "cell-7", "name": "Cell 7"}, **HTMX
    )
    project = Project.objects.get(project_id="cell-7")
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("project_detail", args=[project.pk])


def test_htmx_create_with_errors_answers_the_form_fragment(tenant_admin, as_user, tenant):
    response = as_user(tenant_admin).post(
        reverse("project_create"), {"tenant": tenant.pk, "project_id": "", "name": "N"}, **HTMX
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body
    assert body.lstrip().startswith('<form id="project-form"')
    assert "This field is required." in body


def test_project_list_is_paginated_and_scoped(tenant_admin, as_user, tenant, other_tenant_project):
    for n in range(30):
        ProjectFactory(tenant=tenant, name=f"P{n:02d}")
    client = as_user(tenant_admin)
    first = _table(client.get(reverse("project_list")))
    assert "Page 1 of 2" in first
    assert ">P00<" in first
    assert ">P29<" not in first
    second = _table(client.get(reverse("project_list") + "?page=2"))
    assert ">P29<" in second
    assert ">P00<" not in second
    assert other_tenant_project.name not in first + second


def _table(response) -> str:
    """The project table, without the layout (whose switcher lists projects too)."""
    return response.content.decode().split('id="project-table"', 1)[1]


def test_project_list_filters_by_tenant(platform_admin, as_user, project, other_tenant_project):
    body = _table(as_user(platform_admin).get(reverse("project_list") + f"?tenant={project.tenant.pk}"))
    assert "Cell 1" in body
    assert other_tenant_project.name not in body


def test_project_list_htmx_pagination_answers_the_table_fragment(tenant_admin, as_user, tenant):
    for _ in range(30):
        ProjectFactory(tenant=tenant)
    response = as_user(tenant_admin).get(reverse("project_list") + "?page=2", **HTMX)
    body = response.content.decode()
    assert "<html" not in body
    assert "<table" in body
    assert "HX-Request" in response["Vary"]


def test_new_project_form_preselects_the_current_projects_tenant(as_user, project, other_tenant_project):
    admin = member("tenant_admin", tenant=project.tenant)
    Membership.objects.create(user=admin, tenant=other_tenant_project.tenant, role="tenant_admin")
    client = as_user(admin)
    client.get(reverse("project_detail", args=[other_tenant_project.pk]))
    body = client.get(reverse("project_create")).content.decode()
    assert f'<option value="{other_tenant_project.tenant.pk}" selected>' in body
