from __future__ import annotations

from django.urls import reverse

from apps.core.models import AuditEvent
from apps.tenancy.models import Membership
from tests.factories import UserFactory
from tests.support.members import member
from tests.support.pages import HTMX


def _members_url(project):
    return reverse("project_members", args=[project.pk])


def test_add_member_without_js_redirects_and_audits(project_admin, as_user, project, tenant):
    colleague = member("viewer", tenant=tenant)
    client = as_user(project_admin)
    response = client.post(
        _members_url(project), {"username": colleague.username, "role": "viewer", "limit": ""}
    )
    assert response.status_code == 302
    assert response["Location"] == _members_url(project)
    assert Membership.objects.filter(user=colleague, project=project, role="viewer").exists()
    assert AuditEvent.objects.filter(
        action="member.add", actor=project_admin.username, details__user=colleague.username
    ).exists()
    page = client.get(response["Location"]).content.decode()
    assert f"Added {colleague.username} as Viewer." in page


def test_add_member_with_htmx_answers_the_members_section(tenant_admin, as_user, project):
    newcomer = UserFactory()
    response = as_user(tenant_admin).post(
        _members_url(project), {"username": newcomer.username, "role": "project_admin"}, **HTMX
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body
    assert body.lstrip().startswith('<section id="members"')
    assert newcomer.username in body
    # The success message rides along, swapped out of band into the page's message area.
    assert 'id="messages"' in body
    assert 'hx-swap-oob="true"' in body
    assert f"Added {newcomer.username}" in body


def test_unknown_username_is_a_field_error(project_admin, as_user, project):
    response = as_user(project_admin).post(_members_url(project), {"username": "nobody", "role": "viewer"})
    assert response.status_code == 200
    body = response.content.decode()
    assert 'class="field-error"' in body
    assert "No user with this username in this tenant." in body
    assert 'value="nobody"' in body  # what was typed is kept


def test_project_admin_cannot_bring_in_an_outsider(project_admin, as_user, project):
    stranger = UserFactory()
    response = as_user(project_admin).post(
        _members_url(project), {"username": stranger.username, "role": "viewer"}, **HTMX
    )
    assert b"No user with this username in this tenant." in response.content
    assert not Membership.objects.filter(user=stranger).exists()


def test_invalid_role_and_missing_username_are_field_errors(project_admin, as_user, project):
    response = as_user(project_admin).post(
        _members_url(project), {"username": "", "role": "tenant_owner"}, **HTMX
    )
    body = response.content.decode()
    assert "This field is required." in body
    assert "Select a valid choice" in body


def test_duplicate_role_is_a_form_error(project_admin, viewer, as_user, project):
    response = as_user(project_admin).post(
        _members_url(project), {"username": viewer.username, "role": "viewer"}
    )
    assert response.status_code == 200
    assert b"This user already has this role in the project." in response.content
    assert b'class="form-errors"' in response.content


def test_remove_member_asks_for_confirmation_without_js(project_admin, viewer, as_user, project):
    membership = Membership.objects.get(user=viewer)
    url = reverse("member_remove", args=[project.pk, membership.pk])
    client = as_user(project_admin)
    confirm = client.get(url)
    assert confirm.status_code == 200
    assert f"Remove {viewer.username}?".encode() in confirm.content
    assert Membership.objects.filter(pk=membership.pk).exists()
    response = client.post(url)
    assert response.status_code == 302
    assert response["Location"] == _members_url(project)
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert AuditEvent.objects.filter(
        action="member.remove", actor=project_admin.username, details__user=viewer.username
    ).exists()


def test_remove_member_with_htmx_answers_the_members_section(project_admin, viewer, as_user, project):
    membership = Membership.objects.get(user=viewer)
    response = as_user(project_admin).post(reverse("member_remove", args=[project.pk, membership.pk]), **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="members"')
    assert f'id="member-{membership.pk}"' not in body
    assert 'hx-confirm="Remove' in body  # the remaining rows keep their confirmation


def test_a_role_from_the_identity_provider_is_not_removed_here(project_admin, as_user, project):
    mirrored = member("viewer", project=project)
    Membership.objects.filter(user=mirrored).update(source=Membership.IDP)
    membership = Membership.objects.get(user=mirrored)
    client = as_user(project_admin)
    page = client.get(_members_url(project)).content.decode()
    assert "Managed by your identity provider" in page
    assert reverse("member_remove", args=[project.pk, membership.pk]) not in page
    # A forged removal is refused with the reason, on the section, and changes nothing.
    refused = client.post(reverse("member_remove", args=[project.pk, membership.pk]), **HTMX).content.decode()
    assert "comes from the identity provider; change it there" in refused
    assert Membership.objects.filter(pk=membership.pk).exists()
    assert not AuditEvent.objects.filter(action="member.remove").exists()


def test_an_admin_who_removes_themselves_lands_on_the_dashboard(project_admin, as_user, project):
    own = Membership.objects.get(user=project_admin, project=project)
    client = as_user(project_admin)
    response = client.post(reverse("member_remove", args=[project.pk, own.pk]), **HTMX)
    assert response["HX-Redirect"] == reverse("dashboard")
    assert not Membership.objects.filter(pk=own.pk).exists()
    assert "Removed" in client.get(reverse("dashboard")).content.decode()


def test_tenant_wide_members_are_listed_read_only(tenant_admin, project_admin, as_user, project):
    body = as_user(project_admin).get(_members_url(project)).content.decode()
    assert "Through the tenant" in body
    assert tenant_admin.username in body
    tenant_membership = Membership.objects.get(user=tenant_admin)
    assert f"/members/{tenant_membership.pk}/remove/" not in body
