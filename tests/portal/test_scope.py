"""Another tenant's objects do not exist for the caller (404, audited as a denied
probe); in-scope callers with too little role get 403 on manage actions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.core.models import AuditEvent
from apps.tenancy.models import Membership, ServiceAccount
from apps.tenancy.principal import for_user
from apps.tenancy.services import create_service_account
from tests.support.members import member


@pytest.fixture
def account(project, project_admin):
    return create_service_account(for_user(project_admin), project, name="ci", role="viewer").account


def _project_urls(project, membership, account):
    return [
        reverse("project_detail", args=[project.pk]),
        reverse("project_members", args=[project.pk]),
        reverse("project_service_accounts", args=[project.pk]),
        reverse("member_remove", args=[project.pk, membership.pk]),
        reverse("service_account_revoke", args=[project.pk, account.pk]),
    ]


def test_other_tenant_gets_404_on_every_project_page(outsider, as_user, project, project_admin, account):
    membership = Membership.objects.get(user=project_admin)
    client = as_user(outsider)
    for url in _project_urls(project, membership, account):
        assert client.get(url).status_code == 404, url
    assert (
        client.post(
            reverse("project_members", args=[project.pk]), {"username": outsider.username, "role": "viewer"}
        ).status_code
        == 404
    )
    assert client.post(reverse("service_account_revoke", args=[project.pk, account.pk])).status_code == 404
    assert ServiceAccount.objects.get(pk=account.pk).is_active
    assert AuditEvent.objects.filter(
        actor=outsider.username, outcome="denied", details__reason="out of scope"
    ).exists()


def test_404_page_is_the_portal_page(outsider, as_user, project):
    response = as_user(outsider).get(reverse("project_detail", args=[project.pk]))
    assert response.status_code == 404
    assert b"Not found" in response.content
    assert b"Cell 1" not in response.content


def test_project_viewer_cannot_reach_a_sibling_project(viewer, as_user, other_project):
    assert as_user(viewer).get(reverse("project_detail", args=[other_project.pk])).status_code == 404


def test_viewer_gets_403_on_every_manage_action(viewer, as_user, project, project_admin, account):
    membership = Membership.objects.get(user=project_admin)
    client = as_user(viewer)
    attempts = [
        (
            "post",
            reverse("project_members", args=[project.pk]),
            {"username": viewer.username, "role": "viewer"},
        ),
        ("get", reverse("member_remove", args=[project.pk, membership.pk]), None),
        ("post", reverse("member_remove", args=[project.pk, membership.pk]), {}),
        ("post", reverse("project_service_accounts", args=[project.pk]), {"name": "x", "role": "viewer"}),
        ("get", reverse("service_account_revoke", args=[project.pk, account.pk]), None),
        ("post", reverse("service_account_revoke", args=[project.pk, account.pk]), {}),
    ]
    for method, url, data in attempts:
        response = getattr(client, method)(url, data) if data is not None else client.get(url)
        assert response.status_code == 403, (method, url)
        assert b"do that here" in response.content
    assert Membership.objects.filter(pk=membership.pk).exists()
    assert ServiceAccount.objects.get(pk=account.pk).is_active
    assert (
        AuditEvent.objects.filter(actor=viewer.username, outcome="denied", details__reason="role").count()
        == 6
    )


def test_htmx_manage_action_by_viewer_is_403_too(viewer, as_user, project, account):
    response = as_user(viewer).post(
        reverse("service_account_revoke", args=[project.pk, account.pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 403


def test_objects_of_another_project_are_404_even_with_a_valid_project(
    tenant_admin, as_user, project, other_project
):
    stranger = member("viewer", project=other_project)
    membership = Membership.objects.get(user=stranger)
    response = as_user(tenant_admin).post(reverse("member_remove", args=[project.pk, membership.pk]))
    assert response.status_code == 404
    assert Membership.objects.filter(pk=membership.pk).exists()
