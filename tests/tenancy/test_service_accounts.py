"""Service accounts: the client-credentials token endpoint, platform-signed tokens,
the ``create_service_account`` command, hashing of secrets and revocation."""

from __future__ import annotations

import json
import time
from io import StringIO
from urllib.parse import urlencode

import jwt
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from jwt.algorithms import RSAAlgorithm

from apps.core import audit
from apps.core.models import AuditEvent
from apps.tenancy.models import ServiceAccount

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token"
PROJECTS = "/api/v1/projects"


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def request_token(api, client_id: str, client_secret: str, grant_type: str = "client_credentials"):
    return api.post(
        TOKEN_URL,
        urlencode({"grant_type": grant_type, "client_id": client_id, "client_secret": client_secret}),
        content_type="application/x-www-form-urlencoded",
    )


def access_token(api, credentials: dict) -> str:
    response = request_token(api, credentials["client_id"], credentials["client_secret"])
    assert response.status_code == 200, response.content
    return response.json()["access_token"]


def assert_unauthenticated(response) -> dict:
    assert response.status_code == 401, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "unauthenticated"
    assert body["error"]["correlation_id"] == response["X-Correlation-ID"]
    assert response["WWW-Authenticate"].startswith("Bearer ")
    return body["error"]


@pytest.fixture
def admin_api(api, tenant_admin):
    """A tenant admin's browser session (the portal's own API calls)."""
    api.force_login(tenant_admin)
    return api


@pytest.fixture
def sa(admin_api, project):
    """A project_admin service account of cell-1, created through the API."""
    response = admin_api.post(
        f"{PROJECTS}/{project.pk}/service-accounts", {"name": "ci", "role": "project_admin"}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    admin_api.logout()
    return body


def run_command(*args) -> dict:
    out = StringIO()
    call_command("create_service_account", *args, stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, out.getvalue()
    credentials = json.loads(lines[0])
    assert set(credentials) == {"client_id", "client_secret"}
    return credentials


# --- the token endpoint ------------------------------------------------------


def test_token_endpoint_issues_short_lived_rs256_token(api, sa):
    response = request_token(api, sa["client_id"], sa["client_secret"])
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"access_token", "token_type", "expires_in"}
    assert body["token_type"] == "Bearer"
    assert 300 <= body["expires_in"] <= 900
    assert "no-store" in response["Cache-Control"]

    header = jwt.get_unverified_header(body["access_token"])
    assert header["alg"] == "RS256"
    jwks = api.get("/.well-known/jwks.json").json()
    published = {key["kid"]: key for key in jwks["keys"]}
    assert header["kid"] in published
    assert all("d" not in key and "p" not in key for key in jwks["keys"])  # public halves only

    claims = jwt.decode(
        body["access_token"],
        RSAAlgorithm.from_jwk(json.dumps(published[header["kid"]])),
        algorithms=["RS256"],
        audience=settings.ISSUER,
        issuer=settings.ISSUER,
    )
    assert claims["exp"] - claims["iat"] == body["expires_in"]
    assert claims["client_id"] == sa["client_id"]
    assert claims["sa"] == sa["id"]


def test_jwks_publishes_a_key_before_any_token_is_issued(api, db):
    keys = api.get("/.well-known/jwks.json").json()["keys"]
    assert keys
    assert all(key["kty"] == "RSA" and key["kid"] for key in keys)


def test_credentials_in_the_query_string_are_not_accepted(api, sa):
    query = urlencode(
        {
            "grant_type": "client_credentials",
            "client_id": sa["client_id"],
            "client_secret": sa["client_secret"],
        }
    )
    response = api.post(f"{TOKEN_URL}?{query}")
    assert response.status_code in (400, 415), response.content


def test_wrong_secret_is_rejected_and_audited(api, sa):
    response = request_token(api, sa["client_id"], sa["client_secret"] + "x")
    error = assert_unauthenticated(response)
    assert sa["client_secret"] not in json.dumps(error)
    audit.summarise_denied(now=time.time() + 120)  # refusals are audited as a count per minute
    event = AuditEvent.objects.get(action="auth.token", outcome=AuditEvent.Outcome.DENIED)
    assert event.target_id == sa["client_id"]
    assert event.details["count"] == 1
    assert event.details["first_correlation_id"] == response["X-Correlation-ID"]
    assert sa["client_secret"] not in json.dumps(event.details)


def test_unknown_client_is_rejected_like_a_wrong_secret(api, sa):
    unknown = request_token(api, "sa-does-not-exist", sa["client_secret"])
    wrong = request_token(api, sa["client_id"], "nope")
    assert assert_unauthenticated(unknown)["message"] == assert_unauthenticated(wrong)["message"]
    audit.summarise_denied(now=time.time() + 120)
    assert AuditEvent.objects.filter(action="auth.token", outcome=AuditEvent.Outcome.DENIED).count() == 2


def test_other_grant_types_are_refused(api, sa):
    response = request_token(api, sa["client_id"], sa["client_secret"], grant_type="password")
    assert response.status_code == 400
    assert "grant_type" in response.json()["error"]["details"]


@pytest.mark.parametrize("limit", ["", "compute"])
def test_an_account_keeps_the_limit_it_was_made_with(admin_api, project, limit):
    """A project admin limited to compute stays limited; an unlimited one stays unlimited."""
    url = f"{PROJECTS}/{project.pk}/service-accounts"
    body = {"name": "ci", "role": "project_admin", "limit": limit}
    created = admin_api.post(url, body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["limit"] == limit
    assert admin_api.get(f"{url}/{created.json()['id']}").json()["limit"] == limit


def test_token_works_only_within_the_service_account_project(
    api, sa, project, other_project, other_tenant_project
):
    token = access_token(api, sa)
    listed = api.get(PROJECTS, **bearer(token))
    assert listed.status_code == 200
    assert [p["id"] for p in listed.json()["results"]] == [str(project.pk)]
    assert api.get(f"{PROJECTS}/{project.pk}", **bearer(token)).status_code == 200
    assert api.get(f"{PROJECTS}/{project.pk}/members", **bearer(token)).status_code == 200
    for outside in (other_project, other_tenant_project):
        assert api.get(f"{PROJECTS}/{outside.pk}", **bearer(token)).status_code == 404
        assert api.get(f"{PROJECTS}/{outside.pk}/members", **bearer(token)).status_code == 404
        response = api.post(
            f"{PROJECTS}/{outside.pk}/service-accounts",
            {"name": "x", "role": "viewer"},
            format="json",
            **bearer(token),
        )
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_secret_is_stored_hashed(sa):
    account = ServiceAccount.objects.get(client_id=sa["client_id"])
    assert account.secret_hash
    assert account.secret_hash != sa["client_secret"]
    columns = [field.attname for field in ServiceAccount._meta.concrete_fields]
    row = ServiceAccount.objects.filter(pk=account.pk).values_list(*columns).get()
    assert not any(sa["client_secret"] in str(value) for value in row)


def test_secret_is_shown_once(api, tenant_admin, sa, project):
    api.force_login(tenant_admin)
    listed = api.get(f"{PROJECTS}/{project.pk}/service-accounts")
    detail = api.get(f"{PROJECTS}/{project.pk}/service-accounts/{sa['id']}")
    for response in (listed, detail):
        assert response.status_code == 200, response.content
        assert sa["client_secret"] not in response.content.decode()
        assert "secret_hash" not in response.content.decode()


# --- the management command --------------------------------------------------


def test_command_creates_platform_integration_account(api, db):
    credentials = run_command("--name", "ccp", "--platform-role", "platform_integration")
    account = ServiceAccount.objects.get(client_id=credentials["client_id"])
    assert account.role == "platform_integration"
    assert account.project is None
    token = access_token(api, credentials)
    response = api.post(
        "/api/tenants",
        {"tenant_id": "acme2", "name": "Acme 2", "realm_name": "acme2"},
        format="json",
        **bearer(token),
    )
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("how", ["uuid", "tenant/project", "project"])
def test_command_creates_project_account(api, project, other_project, other_tenant_project, how):
    value = {"uuid": str(project.pk), "tenant/project": "acme/cell-1", "project": "cell-1"}[how]
    credentials = run_command("--name", "deployer", "--project", value, "--role", "project_admin")
    account = ServiceAccount.objects.get(client_id=credentials["client_id"])
    scope = (account.project_id, account.tenant_id, account.role)
    assert scope == (project.pk, project.tenant_id, "project_admin")
    token = access_token(api, credentials)
    listed = api.get(PROJECTS, **bearer(token))
    assert [p["id"] for p in listed.json()["results"]] == [str(project.pk)]
    assert api.get(f"{PROJECTS}/{other_project.pk}", **bearer(token)).status_code == 404


def test_command_refuses_project_without_role(project):
    with pytest.raises(CommandError):
        call_command("create_service_account", "--name", "x", "--project", str(project.pk), stdout=StringIO())
    assert not ServiceAccount.objects.exists()


def test_command_refuses_unknown_project(db):
    with pytest.raises(CommandError):
        call_command(
            "create_service_account",
            "--name",
            "x",
            "--project",
            "nowhere",
            "--role",
            "viewer",
            stdout=StringIO(),
        )


# --- revocation --------------------------------------------------------------


def test_revocation_via_api_stops_issued_tokens_and_new_ones(api, tenant_admin, sa, project):
    token = access_token(api, sa)
    assert api.get(PROJECTS, **bearer(token)).status_code == 200

    api.force_login(tenant_admin)
    deleted = api.delete(f"{PROJECTS}/{project.pk}/service-accounts/{sa['id']}")
    assert deleted.status_code == 204, deleted.content
    detail = api.get(f"{PROJECTS}/{project.pk}/service-accounts/{sa['id']}").json()
    assert detail["active"] is False
    assert detail["revoked_at"]
    api.logout()

    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))  # issued before, still unexpired
    assert_unauthenticated(request_token(api, sa["client_id"], sa["client_secret"]))
    assert AuditEvent.objects.filter(action="service_account.revoke", target_id=sa["id"]).count() == 1
    audit.summarise_denied(now=time.time() + 120)
    denied = AuditEvent.objects.filter(action="auth.token", outcome=AuditEvent.Outcome.DENIED).get()
    assert denied.details["reason"] == "revoked"


def test_revoking_twice_is_harmless(api, tenant_admin, sa, project):
    api.force_login(tenant_admin)
    url = f"{PROJECTS}/{project.pk}/service-accounts/{sa['id']}"
    assert api.delete(url).status_code == 204
    assert api.delete(url).status_code == 204
    assert AuditEvent.objects.filter(action="service_account.revoke").count() == 1


def test_viewer_service_account_cannot_revoke(api, tenant_admin, sa, project):
    api.force_login(tenant_admin)
    viewer = api.post(
        f"{PROJECTS}/{project.pk}/service-accounts", {"name": "ro", "role": "viewer"}, format="json"
    ).json()
    api.logout()
    viewer_token = access_token(api, viewer)
    response = api.delete(f"{PROJECTS}/{project.pk}/service-accounts/{sa['id']}", **bearer(viewer_token))
    assert response.status_code == 403
    assert ServiceAccount.objects.get(pk=sa["id"]).revoked_at is None


def test_revocation_in_another_project_is_not_found(api, sa, other_project):
    token = access_token(api, sa)
    response = api.delete(f"{PROJECTS}/{other_project.pk}/service-accounts/{sa['id']}", **bearer(token))
    assert response.status_code == 404
    assert ServiceAccount.objects.get(pk=sa["id"]).revoked_at is None
