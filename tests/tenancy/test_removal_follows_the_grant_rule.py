"""Removal and revocation check grantability exactly as granting does, on the API
and the portal pages; and service accounts manage neither members nor other
service accounts."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.models import Membership, ServiceAccount
from tests.support.members import member

pytestmark = pytest.mark.django_db


@pytest.fixture
def container_admin(project):
    """CCP's Cell Container Admin: a project admin limited to Kubernetes."""
    return member("project_admin", project=project, limit="kubernetes")


@pytest.fixture
def unlimited_admin(project):
    return member("project_admin", project=project)


@pytest.fixture
def unlimited_account(project, tenant_admin):
    return services.create_service_account(
        principals.for_user(tenant_admin), project, name="bare-metal-bot", role="project_admin"
    ).account


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_limited_admin_cannot_remove_an_unlimited_admin_by_api(
    api, project, container_admin, unlimited_admin
):
    membership = Membership.objects.get(user=unlimited_admin)
    api.force_login(container_admin)
    response = api.delete(f"/api/v1/projects/{project.pk}/members/{membership.pk}")
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "forbidden"
    assert Membership.objects.filter(pk=membership.pk).exists()
    assert AuditEvent.objects.filter(
        action="member.remove", outcome="denied", target_id=str(membership.pk), actor=container_admin.username
    ).exists()


def test_limited_admin_cannot_revoke_an_unlimited_account_by_api(
    api, project, container_admin, unlimited_account
):
    api.force_login(container_admin)
    response = api.delete(f"/api/v1/projects/{project.pk}/service-accounts/{unlimited_account.pk}")
    assert response.status_code == 403, response.content
    unlimited_account.refresh_from_db()
    assert unlimited_account.revoked_at is None


def test_limited_admin_cannot_remove_or_revoke_through_the_portal(
    project, container_admin, unlimited_admin, unlimited_account
):
    client = signed_in(container_admin)
    membership = Membership.objects.get(user=unlimited_admin)
    removed = client.post(reverse("member_remove", args=[project.pk, membership.pk]))
    assert removed.status_code == 403
    assert Membership.objects.filter(pk=membership.pk).exists()
    revoked = client.post(reverse("service_account_revoke", args=[project.pk, unlimited_account.pk]))
    assert revoked.status_code == 403
    unlimited_account.refresh_from_db()
    assert unlimited_account.revoked_at is None


def test_limited_admin_still_removes_what_they_could_grant(api, project, container_admin):
    peer = member("project_admin", project=project, limit="kubernetes")
    viewer = member("viewer", project=project)
    api.force_login(container_admin)
    for user in (peer, viewer):
        membership = Membership.objects.get(user=user)
        response = api.delete(f"/api/v1/projects/{project.pk}/members/{membership.pk}")
        assert response.status_code == 204, response.content


def test_unlimited_admin_removes_and_revokes_the_unlimited(
    api, project, unlimited_admin, unlimited_account, tenant
):
    other = member("project_admin", project=project)
    api.force_login(unlimited_admin)
    membership = Membership.objects.get(user=other)
    assert api.delete(f"/api/v1/projects/{project.pk}/members/{membership.pk}").status_code == 204
    url = f"/api/v1/projects/{project.pk}/service-accounts/{unlimited_account.pk}"
    assert api.delete(url).status_code == 204


# --- service accounts do not manage identities ------------------------------------


def service_account_token(api, project, tenant_admin, role="project_admin") -> str:
    issued = services.create_service_account(principals.for_user(tenant_admin), project, name="ci", role=role)
    form = urlencode(
        {
            "grant_type": "client_credentials",
            "client_id": issued.account.client_id,
            "client_secret": issued.client_secret,
        }
    )
    response = api.post("/api/v1/auth/token", form, content_type="application/x-www-form-urlencoded")
    return response.json()["access_token"]


def test_a_service_account_cannot_create_another(api, project, tenant_admin):
    token = service_account_token(api, project, tenant_admin)
    response = api.post(
        f"/api/v1/projects/{project.pk}/service-accounts",
        {"name": "offspring", "role": "viewer"},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 403, response.content
    assert not ServiceAccount.objects.filter(name="offspring").exists()


def test_a_service_account_cannot_manage_members_or_revoke(api, project, tenant_admin, viewer):
    token = service_account_token(api, project, tenant_admin)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    newcomer = member("viewer", tenant=project.tenant)
    added = api.post(
        f"/api/v1/projects/{project.pk}/members",
        {"username": newcomer.username, "role": "viewer"},
        format="json",
        **auth,
    )
    assert added.status_code == 403, added.content
    membership = Membership.objects.get(user=viewer)
    assert api.delete(f"/api/v1/projects/{project.pk}/members/{membership.pk}", **auth).status_code == 403
    other = services.create_service_account(
        principals.for_user(tenant_admin), project, name="other", role="viewer"
    ).account
    revoked = api.delete(f"/api/v1/projects/{project.pk}/service-accounts/{other.pk}", **auth)
    assert revoked.status_code == 403
    # It keeps the rest of its role: it still reads the project's members.
    assert api.get(f"/api/v1/projects/{project.pk}/members", **auth).status_code == 200


def test_the_portal_offers_no_removal_above_ones_role(
    project, container_admin, unlimited_admin, unlimited_account
):
    client = signed_in(container_admin)
    membership = Membership.objects.get(user=unlimited_admin)
    members = client.get(reverse("project_members", args=[project.pk])).content.decode()
    assert reverse("member_remove", args=[project.pk, membership.pk]) not in members
    assert "Above your own role" in members
    own = Membership.objects.get(user=container_admin)
    assert reverse("member_remove", args=[project.pk, own.pk]) in members  # what they could grant
    accounts = client.get(reverse("project_service_accounts", args=[project.pk])).content.decode()
    assert reverse("service_account_revoke", args=[project.pk, unlimited_account.pk]) not in accounts
