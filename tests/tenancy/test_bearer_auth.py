"""Bearer JWT authentication (CONTRACT.md, Authentication) and the CCP role mapping.

Tokens come from a real issuer (``FakeIssuer``: RSA keys, JWKS over HTTP on
loopback) or from the platform's own token endpoint; nothing of the project is mocked.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlencode

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from apps.tenancy.auth.authentication import BearerTokenAuthentication
from apps.tenancy.models import ServiceAccount, Tenant
from apps.tenancy.roles import DEFAULT_CCP_ROLE_MAP, Perm
from tests.support.issuer import FakeIssuer
from tests.support.members import member

pytestmark = pytest.mark.django_db

PROJECTS = "/api/v1/projects"


# --- helpers -----------------------------------------------------------------


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def assert_unauthenticated(response) -> dict:
    assert response.status_code == 401, response.content
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == "unauthenticated"
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["correlation_id"] == response["X-Correlation-ID"]
    assert response["WWW-Authenticate"].startswith("Bearer ")
    return error


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segment(obj: dict) -> str:
    return b64url(json.dumps(obj, separators=(",", ":")).encode())


def hand_made_token(header: dict, claims: dict, signature: bytes = b"") -> str:
    return f"{segment(header)}.{segment(claims)}.{b64url(signature)}"


def hs256_token(header: dict, claims: dict, secret: bytes) -> str:
    """HS256 by hand: PyJWT refuses PEM keys as HMAC secrets, an attacker does not."""
    signing_input = f"{segment(header)}.{segment(claims)}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def public_pem(public_key) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def ccp_claims(issuer: FakeIssuer, **extra) -> dict:
    return issuer.claims(**{"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"], **extra})


def platform_claims(account, **extra) -> dict:
    """What a platform token of the service account ``account`` claims."""
    now = int(time.time())
    return {
        "iss": settings.ISSUER,
        "aud": settings.ISSUER,
        "sub": f"sa:{account.pk}",
        "sa": str(account.pk),
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        **extra,
    }


def project_viewer_token(issuer: FakeIssuer, **claims) -> str:
    return issuer.token({"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"], **claims})


def platform_jwks(api) -> dict:
    response = api.get("/.well-known/jwks.json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def service_account(project):
    from apps.tenancy import services
    from apps.tenancy.principal import OPERATOR_CLI

    return services.create_service_account(OPERATOR_CLI, project, name="ci", role="viewer")


def sa_token(api, issued) -> str:
    response = api.post(
        "/api/v1/auth/token",
        urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": issued.account.client_id,
                "client_secret": issued.client_secret,
            }
        ),
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200, response.content
    return response.json()["access_token"]


# --- accepted ----------------------------------------------------------------


def test_valid_ccp_token_is_accepted(api, ccp_issuer, project):
    response = api.get(PROJECTS, **bearer(project_viewer_token(ccp_issuer)))
    assert response.status_code == 200, response.content
    assert [p["project_id"] for p in response.json()["results"]] == ["cell-1"]


def test_token_within_leeway_is_accepted(api, ccp_issuer, project):
    """Expired 10 s ago and valid from 10 s from now: both inside the clock-skew leeway."""
    assert 0 < settings.JWT_LEEWAY_SECONDS <= 60
    now = int(time.time())
    token = project_viewer_token(ccp_issuer, iat=now - 300, exp=now - 10, nbf=now + 10)
    assert api.get(PROJECTS, **bearer(token)).status_code == 200


def test_platform_service_account_token_is_accepted(api, service_account):
    response = api.get(PROJECTS, **bearer(sa_token(api, service_account)))
    assert response.status_code == 200, response.content


# --- rejected: each answers 401 with the envelope and WWW-Authenticate -------


def test_missing_token_is_rejected(api, project):
    assert_unauthenticated(api.get(PROJECTS))


@pytest.mark.parametrize(
    "header",
    [
        "Bearer not-a-jwt",
        "Bearer aaaa.bbbb.cccc",
        "Bearer",
        "Bearer    ",
        "Basic dXNlcjpwdw==",
        "Token {token}",
        "{token}",
        "Bearer {token} {token}",
    ],
    ids=[
        "garbage",
        "three-garbage-segments",
        "bearer-alone",
        "bearer-blank",
        "basic-scheme",
        "wrong-scheme",
        "no-scheme",
        "two-tokens",
    ],
)
def test_malformed_authorization_is_rejected(api, ccp_issuer, project, header):
    value = header.format(token=project_viewer_token(ccp_issuer))
    assert_unauthenticated(api.get(PROJECTS, HTTP_AUTHORIZATION=value))


def test_alg_none_from_trusted_issuer_is_rejected(api, ccp_issuer, project):
    header = {"alg": "none", "typ": "JWT", "kid": ccp_issuer.keys[0].kid}
    token = hand_made_token(header, ccp_claims(ccp_issuer))
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_alg_none_claiming_platform_issuer_is_rejected(api, service_account):
    kid = platform_jwks(api)["keys"][0]["kid"]
    claims = platform_claims(service_account.account)
    token = hand_made_token({"alg": "none", "typ": "JWT", "kid": kid}, claims)
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_hs256_signed_with_issuer_public_key_is_rejected(api, ccp_issuer, project):
    """Key confusion: the issuer's public RSA key (public knowledge) used as an HMAC secret."""
    key = ccp_issuer.keys[0]
    secret = public_pem(key.private.public_key())
    token = hs256_token({"alg": "HS256", "typ": "JWT", "kid": key.kid}, ccp_claims(ccp_issuer), secret)
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_hs256_signed_with_platform_public_key_is_rejected(api, service_account):
    """The same attack against the platform's own issuer, with the key from its published JWKS."""
    jwk = platform_jwks(api)["keys"][0]
    secret = public_pem(RSAAlgorithm.from_jwk(json.dumps(jwk)))
    claims = platform_claims(service_account.account)
    token = hs256_token({"alg": "HS256", "typ": "JWT", "kid": jwk["kid"]}, claims, secret)
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_algorithm_not_pinned_for_issuer_is_rejected(api, ccp_issuer, project):
    """Correctly signed with the issuer's key, but RS384 is not an algorithm configured for it."""
    token = ccp_issuer.token(
        {"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]}, algorithm="RS384"
    )
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_untrusted_issuer_is_rejected(api, ccp_issuer, project):
    stranger = FakeIssuer()
    try:
        token = stranger.token(
            {
                "aud": ccp_issuer.audience,
                "domain_id": "acme",
                "project_id": "cell-1",
                "roles": ["Tenant Administrator"],
            }
        )
        assert_unauthenticated(api.get(PROJECTS, **bearer(token)))
        assert stranger.jwks_requests == 0  # an untrusted issuer's keys are never fetched
    finally:
        stranger.close()


def test_trusted_issuer_claim_signed_by_foreign_key_is_rejected(api, ccp_issuer, project):
    """``iss`` and ``kid`` of the trusted issuer, signature by someone else's key."""
    stranger = FakeIssuer()
    try:
        token = ccp_issuer.token(
            {"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]},
            key=stranger.keys[0],
            headers={"kid": ccp_issuer.keys[0].kid},
        )
        assert_unauthenticated(api.get(PROJECTS, **bearer(token)))
    finally:
        stranger.close()


def test_unknown_kid_is_rejected(api, ccp_issuer, project):
    token = ccp_issuer.token(
        {"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]},
        headers={"kid": "no-such-kid"},
    )
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_missing_kid_is_rejected(api, ccp_issuer, project):
    key = ccp_issuer.keys[0]
    token = jwt.encode(ccp_claims(ccp_issuer), key.private, algorithm="RS256")  # no kid header
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_kid_of_a_non_rsa_key_is_rejected(api, ccp_issuer, project):
    """The issuer also publishes an EC key: an RS256 token naming its kid must fail as 401, not crash."""
    ec_private = ec.generate_private_key(ec.SECP256R1())

    class EcKey:
        kid = "ec-" + uuid.uuid4().hex[:8]
        private = ec_private

        @property
        def jwk(self):
            data = json.loads(ECAlgorithm.to_jwk(ec_private.public_key()))
            data.update({"kid": self.kid, "use": "sig", "alg": "ES256"})
            return data

    ccp_issuer.keys.append(EcKey())
    token = ccp_issuer.token(
        {"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]},
        key=ccp_issuer.keys[0],
        headers={"kid": EcKey.kid},
    )
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_expired_token_is_rejected(api, ccp_issuer, project):
    now = int(time.time())
    token = project_viewer_token(ccp_issuer, iat=now - 900, exp=now - 120)  # beyond the leeway
    error = assert_unauthenticated(api.get(PROJECTS, **bearer(token)))
    assert "expired" in error["message"].lower()


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_not_yet_valid_token_is_rejected(api, ccp_issuer, project, claim):
    now = int(time.time())
    token = project_viewer_token(ccp_issuer, **{claim: now + 300}, exp=now + 900)
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_token_without_exp_is_rejected(api, ccp_issuer, project):
    claims = ccp_claims(ccp_issuer)
    del claims["exp"]
    token = jwt.encode(
        claims, ccp_issuer.keys[0].private, algorithm="RS256", headers={"kid": ccp_issuer.keys[0].kid}
    )
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


@pytest.mark.parametrize(
    "aud", ["someone-else", ["someone-else", "another"], None], ids=["other", "list", "missing"]
)
def test_wrong_audience_is_rejected(api, ccp_issuer, project, aud):
    claims = ccp_claims(ccp_issuer, aud=aud)
    if aud is None:
        del claims["aud"]
    token = jwt.encode(
        claims, ccp_issuer.keys[0].private, algorithm="RS256", headers={"kid": ccp_issuer.keys[0].kid}
    )
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_audience_in_list_is_accepted(api, ccp_issuer, project):
    token = project_viewer_token(ccp_issuer, aud=["account", ccp_issuer.audience])
    assert api.get(PROJECTS, **bearer(token)).status_code == 200


def test_unknown_domain_id_is_rejected_on_normal_endpoints(api, ccp_issuer, project):
    token = ccp_issuer.token({"domain_id": "no-such-tenant", "roles": ["Tenant Administrator"]})
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_unknown_domain_id_is_accepted_for_onboarding(api, ccp_issuer, db):
    token = ccp_issuer.token({"domain_id": "newco", "roles": ["GPUaaS Platform Integration"]})
    response = api.post(
        "/api/tenants",
        {"tenant_id": "newco", "name": "NewCo", "realm_name": "newco"},
        format="json",
        **bearer(token),
    )
    assert response.status_code == 201, response.content
    assert Tenant.objects.filter(tenant_id="newco").exists()


def test_revoked_service_account_token_stops_working_at_once(api, service_account):
    from apps.tenancy import services

    token = sa_token(api, service_account)
    assert api.get(PROJECTS, **bearer(token)).status_code == 200
    services.revoke_service_account(None, service_account.account)
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_platform_issuer_signed_by_foreign_key_is_rejected(api, service_account, ccp_issuer):
    """``iss`` is the platform's own, the signature is not (foreign kid, then the platform's kid)."""
    claims = platform_claims(service_account.account, client_id=service_account.account.client_id)
    foreign = ccp_issuer.keys[0]
    platform_kid = platform_jwks(api)["keys"][0]["kid"]
    for kid in (foreign.kid, platform_kid):
        token = jwt.encode(claims, foreign.private, algorithm="RS256", headers={"kid": kid})
        assert_unauthenticated(api.get(PROJECTS, **bearer(token)))
    # The real platform token of the same account still works.
    assert api.get(PROJECTS, **bearer(sa_token(api, service_account))).status_code == 200


def test_platform_token_for_unknown_service_account_is_rejected(api, service_account):
    token = sa_token(api, service_account)
    ServiceAccount.objects.filter(pk=service_account.account.pk).delete()
    assert_unauthenticated(api.get(PROJECTS, **bearer(token)))


def test_rejections_do_not_fall_back_to_the_session(api, ccp_issuer, tenant_admin, project):
    """A logged-in browser sending a bad bearer token is not let in through its session."""
    api.force_login(tenant_admin)
    assert api.get(PROJECTS).status_code == 200
    assert_unauthenticated(api.get(PROJECTS, HTTP_AUTHORIZATION="Bearer garbage"))


# --- CCP role mapping --------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    projects: set  # CCP project ids visible in GET /api/v1/projects
    members: int  # GET members of the token's project
    create_sa: int  # POST a service account in the token's project
    onboard: int  # POST /api/tenants
    allocation_manage: set  # projects (CCP ids) on which the principal holds allocation.manage


TENANT = {"cell-1", "cell-2"}
OWN = {"cell-1"}
ALL = {"cell-1", "cell-2", "g-1"}

ROLE_EXPECTATIONS = {
    "Tenant Super Administrator": Expect(TENANT, 200, 201, 403, TENANT),
    "Tenant Administrator": Expect(TENANT, 200, 201, 403, TENANT),
    "Cell Administrator": Expect(OWN, 200, 201, 403, OWN),
    "Cell VM Admin": Expect(OWN, 200, 201, 403, OWN),
    "Cell Container Admin": Expect(OWN, 200, 201, 403, set()),
    "Cell Viewer": Expect(OWN, 200, 403, 403, set()),
    "Tenant Viewer": Expect(TENANT, 200, 403, 403, set()),
    "Tenant Billing Admin": Expect(TENANT, 403, 403, 403, set()),
    "GPUaaS Platform Integration": Expect(ALL, 200, 403, 201, ALL),
}
CCP_ROLES = sorted(ROLE_EXPECTATIONS)

CONTRACT_ROLE_TABLE = {
    "Tenant Super Administrator": ("tenant_owner", ""),
    "Tenant Administrator": ("tenant_admin", ""),
    "Cell Administrator": ("project_admin", ""),
    "Cell VM Admin": ("project_admin", "compute"),
    "Cell Container Admin": ("project_admin", "kubernetes"),
    "Cell Viewer": ("viewer", ""),
    "Tenant Viewer": ("viewer", ""),
    "Tenant Billing Admin": ("billing_admin", ""),
    "GPUaaS Platform Integration": ("platform_integration", ""),
}


@pytest.fixture
def scene(project, other_project, other_tenant_project):
    return {"cell-1": project, "cell-2": other_project, "g-1": other_tenant_project}


def role_token(issuer: FakeIssuer, role: str) -> str:
    return issuer.token({"domain_id": "acme", "project_id": "cell-1", "roles": [role]})


def test_default_role_map_is_the_contract_table():
    assert {
        name: (str(role), str(limit)) for name, (role, limit) in DEFAULT_CCP_ROLE_MAP.items()
    } == CONTRACT_ROLE_TABLE
    assert set(ROLE_EXPECTATIONS) == set(CONTRACT_ROLE_TABLE)


@pytest.mark.parametrize("role", CCP_ROLES)
def test_role_sees_projects(api, ccp_issuer, scene, role):
    token = role_token(ccp_issuer, role)
    listed = api.get(PROJECTS, **bearer(token))
    assert listed.status_code == 200, listed.content
    assert {p["project_id"] for p in listed.json()["results"]} == ROLE_EXPECTATIONS[role].projects
    for ccp_id, obj in scene.items():
        detail = api.get(f"{PROJECTS}/{obj.pk}", **bearer(token))
        expected = 200 if ccp_id in ROLE_EXPECTATIONS[role].projects else 404
        assert detail.status_code == expected, (ccp_id, detail)


@pytest.mark.parametrize("role", CCP_ROLES)
def test_role_lists_members(api, ccp_issuer, scene, role):
    response = api.get(f"{PROJECTS}/{scene['cell-1'].pk}/members", **bearer(role_token(ccp_issuer, role)))
    assert response.status_code == ROLE_EXPECTATIONS[role].members, response.content


@pytest.mark.parametrize("role", CCP_ROLES)
def test_role_creates_service_accounts(api, ccp_issuer, scene, role):
    token = role_token(ccp_issuer, role)
    response = api.post(
        f"{PROJECTS}/{scene['cell-1'].pk}/service-accounts",
        {"name": "bot", "role": "viewer"},
        format="json",
        **bearer(token),
    )
    expected = ROLE_EXPECTATIONS[role].create_sa
    assert response.status_code == expected, response.content
    if expected == 403:
        assert response.json()["error"]["code"] == "forbidden"
    assert ServiceAccount.objects.filter(name="bot").exists() == (expected == 201)


@pytest.mark.parametrize("role", CCP_ROLES)
def test_role_onboards_tenants(api, ccp_issuer, scene, role):
    response = api.post(
        "/api/tenants",
        {"tenant_id": "initech", "name": "Initech", "realm_name": "initech"},
        format="json",
        **bearer(role_token(ccp_issuer, role)),
    )
    assert response.status_code == ROLE_EXPECTATIONS[role].onboard, response.content
    assert Tenant.objects.filter(tenant_id="initech").exists() == (response.status_code == 201)


@pytest.mark.parametrize("role", CCP_ROLES)
def test_role_allocation_manage(ccp_issuer, scene, role):
    """No allocation endpoint here: read the principal the real authentication builds from the token."""
    request = Request(APIRequestFactory().get(PROJECTS, **bearer(role_token(ccp_issuer, role))))
    user, principal = BearerTokenAuthentication().authenticate(request)
    assert user.is_authenticated
    assert principal.kind == "federated"
    allowed = {
        ccp_id
        for ccp_id, obj in scene.items()
        if principal.can(Perm.ALLOCATION_MANAGE, obj.tenant_id, obj.pk)
    }
    assert allowed == ROLE_EXPECTATIONS[role].allocation_manage


def test_project_role_acts_only_on_the_token_project(api, ccp_issuer, scene):
    token = role_token(ccp_issuer, "Cell Administrator")
    other = scene["cell-2"]
    assert api.get(f"{PROJECTS}/{other.pk}/members", **bearer(token)).status_code == 404
    response = api.post(
        f"{PROJECTS}/{other.pk}/service-accounts",
        {"name": "bot", "role": "viewer"},
        format="json",
        **bearer(token),
    )
    assert response.status_code == 404
    assert not ServiceAccount.objects.filter(project=other).exists()


def test_tenant_role_acts_on_every_project_of_its_tenant(api, ccp_issuer, scene):
    token = role_token(ccp_issuer, "Tenant Administrator")
    for ccp_id in ("cell-1", "cell-2"):
        response = api.post(
            f"{PROJECTS}/{scene[ccp_id].pk}/service-accounts",
            {"name": f"bot-{ccp_id}", "role": "viewer"},
            format="json",
            **bearer(token),
        )
        assert response.status_code == 201, response.content
    response = api.post(
        f"{PROJECTS}/{scene['g-1'].pk}/service-accounts",
        {"name": "bot-g", "role": "viewer"},
        format="json",
        **bearer(token),
    )
    assert response.status_code == 404


def test_billing_admin_cannot_see_members(api, ccp_issuer, scene):
    member("viewer", project=scene["cell-1"])
    token = role_token(ccp_issuer, "Tenant Billing Admin")
    response = api.get(f"{PROJECTS}/{scene['cell-1'].pk}/members", **bearer(token))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_project_role_with_unknown_project_gets_nothing(api, ccp_issuer, scene):
    token = ccp_issuer.token(
        {"domain_id": "acme", "project_id": "no-such-cell", "roles": ["Cell Administrator"]}
    )
    response = api.get(PROJECTS, **bearer(token))
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_unknown_ccp_roles_grant_nothing(api, ccp_issuer, scene):
    roles = ["Galactic Emperor", 42, ["Tenant Administrator"], {"role": "x"}]  # junk must not crash
    token = ccp_issuer.token({"domain_id": "acme", "project_id": "cell-1", "roles": roles})
    response = api.get(PROJECTS, **bearer(token))
    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize(("realm", "status"), [("acme", 200), ("initech", 401), (["acme"], 401)])
def test_a_tokens_realm_must_be_the_tenants(api, ccp_issuer, project, realm, status):
    """acme was onboarded with the realm ``acme``: a token of another realm (or a realm
    that is not a name) naming acme's domain_id is refused."""
    response = api.get(PROJECTS, **bearer(project_viewer_token(ccp_issuer, realm_name=realm)))
    assert response.status_code == status, response.content
