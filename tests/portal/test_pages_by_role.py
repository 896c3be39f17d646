"""Each page renders for the roles that may see it, and answers 403 (in scope,
too little role) for the others."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import UserFactory
from tests.support.members import member

ROLES = ["tenant_admin", "project_admin", "viewer", "billing_admin", "platform_admin"]


@pytest.fixture
def users(tenant_admin, project_admin, viewer, billing_admin, platform_admin):
    return {
        "tenant_admin": tenant_admin,
        "project_admin": project_admin,
        "viewer": viewer,
        "billing_admin": billing_admin,
        "platform_admin": platform_admin,
    }


@pytest.mark.parametrize("role", ROLES)
def test_dashboard_and_project_list_render_for_every_role(role, users, as_user, project):
    client = as_user(users[role])
    dashboard = client.get("/")
    assert dashboard.status_code == 200
    assert b"Acme" in dashboard.content
    projects = client.get(reverse("project_list"))
    assert projects.status_code == 200
    assert b"Cell 1" in projects.content


# The page (a URL name, and whether it takes the project), and the roles it renders for.
PAGES = [
    ("project_members", True, {"tenant_admin", "project_admin", "viewer", "platform_admin"}),
    ("project_service_accounts", True, {"tenant_admin", "project_admin", "platform_admin"}),
    ("audit_log", False, {"tenant_admin", "platform_admin"}),
    ("project_create", False, {"tenant_admin", "platform_admin"}),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("page", "in_project", "allowed"), PAGES, ids=[page for page, _, _ in PAGES])
def test_page_renders_for_its_roles_and_is_403_for_the_others(
    page, in_project, allowed, role, users, as_user, project
):
    url = reverse(page, args=[project.pk] if in_project else [])
    assert as_user(users[role]).get(url).status_code == (200 if role in allowed else 403)


@pytest.mark.parametrize("role", ROLES)
def test_project_page_renders_the_tabs_the_role_may_see(role, users, as_user, project):
    response = as_user(users[role]).get(reverse("project_detail", args=[project.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert ("Service accounts</a>" in body) == (role in {"tenant_admin", "project_admin", "platform_admin"})
    assert ("Members</a>" in body) == (role != "billing_admin")


def test_viewer_sees_members_without_manage_controls(viewer, project_admin, as_user, project):
    body = as_user(viewer).get(reverse("project_members", args=[project.pk])).content.decode()
    assert project_admin.username in body
    assert "Add a member" not in body
    assert "Remove</a>" not in body


def test_manager_sees_manage_controls(project_admin, as_user, project):
    body = as_user(project_admin).get(reverse("project_members", args=[project.pk])).content.decode()
    assert "Add a member" in body
    assert "Remove</a>" in body


def test_navigation_shows_audit_only_to_those_who_may_read_it(tenant_admin, viewer, as_user, project):
    assert b'href="/audit/"' in as_user(tenant_admin).get("/").content
    assert b'href="/audit/"' not in as_user(viewer).get("/").content


def test_admin_link_only_for_staff(tenant_admin, platform_admin, as_user, project):
    assert b'href="/admin/"' not in as_user(tenant_admin).get("/").content
    assert b'href="/admin/"' in as_user(platform_admin).get("/").content


def test_user_without_any_role_gets_empty_states(as_user, db):
    client = as_user(UserFactory())
    assert b"No tenant yet" in client.get("/").content
    assert b"No projects" in client.get(reverse("project_list")).content
    assert client.get(reverse("audit_log")).status_code == 403
    assert client.get(reverse("project_create")).status_code == 403


def test_dashboard_shows_tenant_status_quota_and_counts(tenant_admin, as_user, project, other_project):
    from tests.factories import QuotaFactory

    QuotaFactory(tenant=project.tenant, resource="gpus", limit=64)
    member("viewer", project=project)
    body = as_user(tenant_admin).get("/").content.decode()
    assert "badge-ok" in body
    assert "Active" in body
    assert "GPUs" in body
    assert "64" in body
    assert "Cell 1" in body
    assert "Cell 2" in body


def test_quota_hidden_from_project_scoped_roles(viewer, as_user, project):
    from tests.factories import QuotaFactory

    QuotaFactory(tenant=project.tenant, resource="gpus", limit=64)
    body = as_user(viewer).get("/").content.decode()
    assert "GPUs" not in body


def test_anonymous_is_sent_to_login(client, project):
    response = client.get(reverse("project_detail", args=[project.pk]))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_anonymous_htmx_request_gets_hx_redirect_to_login(client, project):
    response = client.get(
        reverse("project_members", args=[project.pk]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL=f"http://testserver/projects/{project.pk}/",
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/accounts/login/?next=/projects/{project.pk}/"
