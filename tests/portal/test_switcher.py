"""The tenant/project switcher: offers only visible projects, keeps the choice in the session."""

from __future__ import annotations

from django.urls import reverse

from apps.portal.context_processors import SESSION_PROJECT


def _switcher(body: str) -> str:
    return body.split('id="project-switcher"', 1)[1].split("</select>", 1)[0]


def test_offers_only_projects_the_user_may_see(viewer, as_user, project, other_project, other_tenant_project):
    options = _switcher(as_user(viewer).get("/").content.decode())
    assert str(project.pk) in options
    assert str(other_project.pk) not in options
    assert str(other_tenant_project.pk) not in options


def test_groups_projects_by_tenant(tenant_admin, as_user, project, other_project):
    options = _switcher(as_user(tenant_admin).get("/").content.decode())
    assert '<optgroup label="Acme">' in options
    assert str(project.pk) in options
    assert str(other_project.pk) in options


def test_switching_keeps_the_project_in_the_session(tenant_admin, as_user, project, other_project):
    client = as_user(tenant_admin)
    response = client.post(reverse("switch_project"), {"project": str(other_project.pk)})
    assert response.status_code == 302
    assert response["Location"] == reverse("project_detail", args=[other_project.pk])
    assert client.session[SESSION_PROJECT] == str(other_project.pk)
    options = _switcher(client.get(reverse("project_list")).content.decode())
    assert f'<option value="{other_project.pk}" selected>' in options


def test_opening_a_project_makes_it_current(tenant_admin, as_user, project):
    client = as_user(tenant_admin)
    client.get(reverse("project_detail", args=[project.pk]))
    assert client.session[SESSION_PROJECT] == str(project.pk)


def test_cannot_switch_to_another_tenants_project(tenant_admin, as_user, project, other_tenant_project):
    client = as_user(tenant_admin)
    assert (
        client.post(reverse("switch_project"), {"project": str(other_tenant_project.pk)}).status_code == 404
    )
    assert client.post(reverse("switch_project"), {"project": "not-a-uuid"}).status_code == 404
    assert SESSION_PROJECT not in client.session


def test_choosing_all_projects_clears_the_choice(tenant_admin, as_user, project):
    client = as_user(tenant_admin)
    client.post(reverse("switch_project"), {"project": str(project.pk)})
    response = client.post(reverse("switch_project"), {"project": ""})
    assert response["Location"] == reverse("dashboard")
    assert SESSION_PROJECT not in client.session


def test_switch_needs_post(tenant_admin, as_user, project):
    assert as_user(tenant_admin).get(reverse("switch_project")).status_code == 405
