"""What a trusted issuer may vouch for: every issuer names its audience (start-up
fails otherwise), may be limited to tenants and roles, and grants platform roles
only when configured to (``platform_roles``)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from apps.tenancy.auth import issuer_config
from apps.tenancy.models import Tenant
from tests.support.issuer import FakeIssuer
from tests.support.startup import manage, production_env

pytestmark = pytest.mark.django_db

PROJECTS = "/api/v1/projects"
INITECH = {"tenant_id": "initech", "name": "Initech", "realm_name": "initech"}
JWKS = "https://sso.example.com/realms/ccp/protocol/openid-connect/certs"


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def issuer_with(settings):
    made = []

    def make(**limits) -> FakeIssuer:
        issuer = FakeIssuer(**limits)
        made.append(issuer)
        settings.TRUSTED_ISSUERS = [issuer.config]
        return issuer

    yield make
    for issuer in made:
        issuer.close()


def test_an_issuer_without_audience_stops_start_up(tmp_path):
    entry = {"issuer": "https://sso.example.com/realms/ccp", "jwks_uri": JWKS}
    result = manage(production_env(tmp_path, GPUAAS_TRUSTED_ISSUERS=json.dumps([entry])), "check")
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured" in last_line
    assert "GPUAAS_TRUSTED_ISSUERS" in last_line
    assert "audience" in last_line


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"audience": ""}, "audience"),
        ({"audience": "gpuaas", "roles": ["platform_integration"]}, "platform_roles"),
        ({"audience": "gpuaas", "roles": ["root"]}, "unknown role"),
        ({"audience": "gpuaas", "tenants": ["acme"], "platform_roles": True}, "tenants"),
        ({"audience": "gpuaas", "platform_roles": "yes"}, "platform_roles"),
        ({"audience": "gpuaas", "tenant": ["acme"]}, "unknown field"),
    ],
)
def test_inconsistent_issuer_limits_are_refused(extra, said):
    entry = {"issuer": "https://sso.example.com/realms/ccp", "jwks_uri": JWKS, **extra}
    with pytest.raises(ImproperlyConfigured) as refused:
        issuer_config.parse([entry])
    assert "GPUAAS_TRUSTED_ISSUERS" in str(refused.value)
    assert said in str(refused.value)


def test_an_issuer_not_trusted_for_platform_roles_cannot_onboard_tenants(api, issuer_with, tenant):
    """Another realm's issuer: its token claims CCP's integration role, which it may not grant."""
    other = issuer_with(platform_roles=False)
    token = other.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post("/api/tenants", INITECH, format="json", **bearer(token))
    assert response.status_code == 403, response.content
    assert not Tenant.objects.filter(tenant_id="initech").exists()


def test_ccp_issuer_trusted_for_platform_roles_onboards(api, issuer_with, tenant):
    ccp = issuer_with(platform_roles=True)
    token = ccp.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post("/api/tenants", INITECH, format="json", **bearer(token))
    assert response.status_code == 201, response.content


def test_a_token_without_aud_is_refused(api, issuer_with, project):
    ccp = issuer_with()
    token = ccp.token({"aud": None, "domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]})
    assert api.get(PROJECTS, **bearer(token)).status_code == 401


def test_an_issuer_limited_to_tenants_cannot_act_for_another(api, issuer_with, project):
    limited = issuer_with(platform_roles=False, tenants=["globex"])
    token = limited.token({"domain_id": "acme", "project_id": "cell-1", "roles": ["Tenant Administrator"]})
    response = api.get(PROJECTS, **bearer(token))
    assert response.status_code == 401, response.content
    assert "not trusted for this tenant" in response.json()["error"]["message"]


def test_an_issuer_limited_to_roles_grants_only_those(api, issuer_with, project):
    limited = issuer_with(platform_roles=False, roles=["viewer"])
    token = limited.token(
        {"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer", "Cell Administrator"]}
    )
    listed = api.get(PROJECTS, **bearer(token))
    assert listed.status_code == 200
    assert [p["project_id"] for p in listed.json()["results"]] == ["cell-1"]
    created = api.post(
        f"{PROJECTS}/{project.pk}/service-accounts",
        {"name": "bot", "role": "viewer"},
        format="json",
        **bearer(token),
    )
    assert created.status_code == 403, created.content
