"""The platform API's projects, members and service accounts (/api/v1)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from apps.core.models import AuditEvent
from apps.tenancy.models import Membership, Project, ServiceAccount
from tests.factories import UserFactory
from tests.support.members import member

pytestmark = pytest.mark.django_db


def members_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/members"


def accounts_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/service-accounts"


def request_token(api, client_id: str, client_secret: str):
    form = urlencode(
        {"grant_type": "client_credentials", "client_id": client_id, "client_secret": client_secret}
    )
    return api.post("/api/v1/auth/token", form, content_type="application/x-www-form-urlencoded")


# --- projects ----------------------------------------------------------------


def test_tenant_admin_creates_a_project_in_their_only_tenant(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    response = api.post("/api/v1/projects", {"project_id": "cell-7", "name": "Cell 7"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["project_id"], body["name"], body["tenant"], body["tenant_id"]) == (
        "cell-7",
        "Cell 7",
        str(tenant.pk),
        "acme",
    )
    assert api.get(f"/api/v1/projects/{body['id']}").json()["id"] == body["id"]

    again = api.post("/api/v1/projects", {"project_id": "cell-7", "name": "Renamed"}, format="json")
    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    assert again.json()["name"] == "Cell 7"
    assert Project.objects.filter(tenant=tenant, project_id="cell-7").count() == 1
    assert AuditEvent.objects.filter(action="project.create", target_id=body["id"]).count() == 1


def test_a_caller_of_several_tenants_must_name_the_tenant(api, tenant, other_tenant_project):
    user = member("tenant_admin", tenant=tenant)
    Membership.objects.create(user=user, tenant=other_tenant_project.tenant, role="tenant_admin")
    api.force_login(user)
    response = api.post("/api/v1/projects", {"project_id": "x", "name": "X"}, format="json")
    assert response.status_code == 400
    assert "tenant" in response.json()["error"]["details"]
    named = api.post(
        "/api/v1/projects",
        {"tenant": str(other_tenant_project.tenant.pk), "project_id": "x", "name": "X"},
        format="json",
    )
    assert named.status_code == 201
    assert named.json()["tenant_id"] == "globex"


def test_project_create_validates_the_body(api, tenant_admin):
    api.force_login(tenant_admin)
    response = api.post("/api/v1/projects", {"project_id": "has space", "tenant": "nope"}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"project_id", "name", "tenant"}


def test_unknown_project_answers_not_found(api, tenant_admin):
    api.force_login(tenant_admin)
    response = api.get("/api/v1/projects/3f1b6c8e-0000-4000-8000-000000000000/members")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


# --- members -----------------------------------------------------------------


def test_members_lists_the_projects_members(api, project, other_project, project_admin, viewer):
    member("viewer", project=other_project)  # another project's member is not listed
    api.force_login(viewer)
    response = api.get(members_url(project))
    assert response.status_code == 200
    listed = {(m["username"], m["role"]) for m in response.json()["results"]}
    assert listed == {(project_admin.username, "project_admin"), (viewer.username, "viewer")}
    assert all(m["project"] == str(project.pk) for m in response.json()["results"])


def test_project_admin_adds_a_member_of_the_tenant(api, project, other_project, project_admin):
    colleague = member("viewer", project=other_project)
    api.force_login(project_admin)
    response = api.post(
        members_url(project), {"username": colleague.username, "role": "viewer"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert (response.json()["username"], response.json()["role"], response.json()["project"]) == (
        colleague.username,
        "viewer",
        str(project.pk),
    )
    assert Membership.objects.filter(user=colleague, project=project, role="viewer").exists()
    event = AuditEvent.objects.get(action="member.add")
    assert (event.actor, event.tenant_id, event.project_id) == (
        project_admin.username,
        project.tenant_id,
        project.pk,
    )
    assert event.details == {"user": colleague.username, "role": "viewer"}

    twice = api.post(members_url(project), {"username": colleague.username, "role": "viewer"}, format="json")
    assert twice.status_code == 409
    assert twice.json()["error"]["code"] == "conflict"


def test_project_admin_cannot_bring_in_an_outsider_but_tenant_admin_can(
    api, project, project_admin, tenant_admin
):
    outsider = UserFactory()
    api.force_login(project_admin)
    refused = api.post(members_url(project), {"username": outsider.username, "role": "viewer"}, format="json")
    assert refused.status_code == 400
    assert "username" in refused.json()["error"]["details"]
    api.force_login(tenant_admin)
    added = api.post(members_url(project), {"username": outsider.username, "role": "viewer"}, format="json")
    assert added.status_code == 201


def test_a_project_admin_cannot_tell_an_outsider_from_an_unknown_username(
    api, project, project_admin, other_tenant_project
):
    outsider = member("tenant_admin", tenant=other_tenant_project.tenant)
    api.force_login(project_admin)
    answers = [
        api.post(members_url(project), {"username": username, "role": "viewer"}, format="json")
        for username in (outsider.username, "nobody-at-all")
    ]
    assert [answer.status_code for answer in answers] == [400, 400]
    (outsider_error, unknown_error) = ({**a.json()["error"], "correlation_id": None} for a in answers)
    assert outsider_error == unknown_error
    assert unknown_error["details"] == {"username": ["No user with this username in this tenant."]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "nobody-at-all", "role": "viewer"}, "username"),
        ({"username": "x", "role": "tenant_admin"}, "role"),
        ({"username": "x", "role": "platform_admin"}, "role"),
        ({"username": "x", "role": "viewer", "limit": "gpus"}, "limit"),
        ({"role": "viewer"}, "username"),
    ],
)
def test_adding_a_member_validates_the_body(api, project, project_admin, body, field):
    api.force_login(project_admin)
    response = api.post(members_url(project), body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]


def test_removing_a_member(api, project, project_admin, viewer):
    membership = Membership.objects.get(user=viewer, project=project)
    api.force_login(project_admin)
    assert api.delete(f"{members_url(project)}/{membership.pk}").status_code == 204
    assert not Membership.objects.filter(pk=membership.pk).exists()
    event = AuditEvent.objects.get(action="member.remove")
    assert event.target_id == str(membership.pk)
    assert event.details == {
        "user": viewer.username,
        "role": "viewer",
    }
    assert api.delete(f"{members_url(project)}/{membership.pk}").status_code == 404


def test_a_membership_of_another_project_is_not_reachable_through_this_one(
    api, project, other_project, project_admin
):
    elsewhere = Membership.objects.get(user=member("viewer", project=other_project))
    api.force_login(project_admin)
    assert api.delete(f"{members_url(project)}/{elsewhere.pk}").status_code == 404
    assert Membership.objects.filter(pk=elsewhere.pk).exists()


# --- a limited admin grants no more than it holds -----------------------------


@pytest.fixture
def container_admin(project):
    """CCP's Cell Container Admin: a project admin limited to Kubernetes (no bare-metal allocation)."""
    return member("project_admin", project=project, limit="kubernetes")


@pytest.mark.parametrize(("limit", "expected"), [("", 400), ("compute", 400), ("kubernetes", 201)])
def test_limited_admin_cannot_add_a_less_limited_admin(
    api, project, other_project, container_admin, limit, expected
):
    colleague = member("viewer", project=other_project)
    api.force_login(container_admin)
    response = api.post(
        members_url(project),
        {"username": colleague.username, "role": "project_admin", "limit": limit},
        format="json",
    )
    assert response.status_code == expected, response.content
    if expected == 400:
        assert "role" in response.json()["error"]["details"]
        assert not Membership.objects.filter(user=colleague, project=project).exists()


@pytest.mark.parametrize(("limit", "expected"), [("", 400), ("kubernetes", 201)])
def test_limited_admin_cannot_mint_a_less_limited_service_account(
    api, project, container_admin, limit, expected
):
    api.force_login(container_admin)
    response = api.post(
        accounts_url(project), {"name": "ci", "role": "project_admin", "limit": limit}, format="json"
    )
    assert response.status_code == expected, response.content
    assert ServiceAccount.objects.filter(project=project).count() == (1 if expected == 201 else 0)


def test_limited_admin_may_still_grant_viewer(api, project, container_admin):
    api.force_login(container_admin)
    assert api.post(accounts_url(project), {"name": "ro", "role": "viewer"}, format="json").status_code == 201


# --- service accounts --------------------------------------------------------


def test_service_account_secret_is_shown_once_and_its_token_works(api, project, project_admin):
    api.force_login(project_admin)
    created = api.post(accounts_url(project), {"name": "ci", "role": "viewer"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["client_secret"]
    assert body["client_id"].startswith("sa-")
    assert body["active"] is True
    assert body["created_by"] == project_admin.username
    account = ServiceAccount.objects.get(pk=body["id"])
    assert body["client_secret"] not in account.secret_hash

    listed = api.get(accounts_url(project)).json()["results"]
    assert [a["id"] for a in listed] == [body["id"]]
    assert "client_secret" not in listed[0]
    assert "client_secret" not in api.get(f"{accounts_url(project)}/{body['id']}").json()

    token = request_token(api, body["client_id"], body["client_secret"])
    assert token.status_code == 200
    assert token.json()["token_type"] == "Bearer"
    bot = type(api)()
    bot.credentials(HTTP_AUTHORIZATION=f"Bearer {token.json()['access_token']}")
    assert bot.get(f"/api/v1/projects/{project.pk}").status_code == 200
    # A viewer account may look but not manage.
    assert bot.post(accounts_url(project), {"name": "x", "role": "viewer"}, format="json").status_code == 403


def test_revoking_a_service_account_stops_its_token_at_once(api, project, project_admin):
    api.force_login(project_admin)
    body = api.post(accounts_url(project), {"name": "ci", "role": "viewer"}, format="json").json()
    token = request_token(api, body["client_id"], body["client_secret"]).json()["access_token"]
    bot = type(api)()
    bot.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert bot.get(f"/api/v1/projects/{project.pk}").status_code == 200

    assert api.delete(f"{accounts_url(project)}/{body['id']}").status_code == 204
    assert bot.get(f"/api/v1/projects/{project.pk}").status_code == 401
    shown = api.get(f"{accounts_url(project)}/{body['id']}").json()
    assert shown["active"] is False
    assert shown["revoked_at"]
    # Revoking again changes nothing and writes no second event.
    assert api.delete(f"{accounts_url(project)}/{body['id']}").status_code == 204
    assert AuditEvent.objects.filter(action="service_account.revoke", target_id=body["id"]).count() == 1
    refused = request_token(api, body["client_id"], body["client_secret"])
    assert refused.status_code == 401


def test_a_service_account_of_another_project_is_not_reachable_through_this_one(
    api, project, other_project, tenant_admin
):
    api.force_login(tenant_admin)
    body = api.post(accounts_url(other_project), {"name": "ci", "role": "viewer"}, format="json").json()
    assert api.get(f"{accounts_url(project)}/{body['id']}").status_code == 404
    assert api.delete(f"{accounts_url(project)}/{body['id']}").status_code == 404
    assert ServiceAccount.objects.get(pk=body["id"]).revoked_at is None
