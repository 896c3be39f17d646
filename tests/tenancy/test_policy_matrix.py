"""Every tenancy endpoint, and the other endpoints a hostile tenant would aim at (a
tenant's usage, bill and quota, allocations, where its alerts go), against a caller in
every role.

The rule: outside your scope is 404 (as if the object did not exist), in scope
but too little role is 403, and both write a denied audit event.
"""

from __future__ import annotations

import pytest

from apps.access.models import AccessCredential, AuthorizedKey, ProjectSecret
from apps.allocations.models import Allocation
from apps.core.models import AuditEvent
from apps.metering.models import BillingExport
from apps.monitoring.models import AlertSubscription
from apps.tenancy.models import Membership, Project, Quota, ServiceAccount, Tenant
from apps.webhooks.models import Delivery
from tests.support.snapshots import made_once_fixtures
from tests.support.world import (
    ALERT_RECEIVER,
    CALLERS,
    MATRIX_KEYS,
    build_world,
    sign_in,
    with_alert_subscription,
    with_allocation,
)

pytestmark = pytest.mark.django_db


def _full_world():
    return with_alert_subscription(with_allocation(build_world()))


# the receivers below listen on loopback
globals().update(made_once_fixtures(_full_world, ALERT_PRIVATE_URLS=True))


@pytest.fixture
def caller_client(api, world, request):
    """``api`` signed in as the test's ``caller`` parameter; yields (client, actor)."""

    def sign(caller):
        issuer = request.getfixturevalue("ccp_issuer") if caller == "platform_integration" else None
        return sign_in(api, world, caller, issuer)

    return sign


A1 = "/api/v1/projects/{w.project.pk}"
ALLOCATION = A1 + "/allocations/{w.allocation.pk}"
NODE = "/api/baremetal-manager/{w.allocation.node_id}"
SUBSCRIPTION = "/api/alerts/subscriptions/{w.target_subscription.pk}"

# endpoint: (method, path template, body)
ENDPOINTS = {
    "ccp_onboard": (
        "post",
        "/api/tenants",
        lambda w: {"tenant_id": "newco", "name": "NewCo", "realm_name": "newco"},
    ),
    "ccp_tenant_get": ("get", "/api/tenants/{w.tenant.tenant_id}", None),
    "ccp_project_create": (
        "post",
        "/api/tenants/{w.tenant.tenant_id}/projects",
        lambda w: {"project_id": "cell-9", "name": "Cell 9"},
    ),
    "tenant_get": ("get", "/api/v1/tenants/{w.tenant.pk}", None),
    "project_list": ("get", "/api/v1/projects", None),
    "project_create": (
        "post",
        "/api/v1/projects",
        lambda w: {"tenant": str(w.tenant.pk), "project_id": "cell-9", "name": "Cell 9"},
    ),
    "project_get": ("get", A1, None),
    "member_list": ("get", A1 + "/members", None),
    "member_add": ("post", A1 + "/members", lambda w: {"username": w.candidate.username, "role": "viewer"}),
    "member_remove": ("delete", A1 + "/members/{w.target_membership.pk}", None),
    "sa_list": ("get", A1 + "/service-accounts", None),
    "sa_create": ("post", A1 + "/service-accounts", lambda w: {"name": "ci", "role": "viewer"}),
    "sa_get": ("get", A1 + "/service-accounts/{w.target_service_account.pk}", None),
    "sa_revoke": ("delete", A1 + "/service-accounts/{w.target_service_account.pk}", None),
    "audit_list": ("get", "/api/v1/audit", None),
    "credential_list": ("get", A1 + "/access-credentials", None),
    "credential_create": ("post", A1 + "/access-credentials", lambda w: {"name": "new-key"}),
    "credential_deliver": ("post", A1 + "/access-credentials/{w.target_credential.pk}/deliver", lambda w: {}),
    "credential_delete": ("delete", A1 + "/access-credentials/{w.target_credential.pk}", None),
    "secret_list": ("get", A1 + "/secrets", None),
    "secret_create": ("post", A1 + "/secrets", lambda w: {"name": "new", "value": "v"}),
    "secret_delete": ("delete", A1 + "/secrets/{w.target_secret.pk}", None),
    # Host access: who may log in to the project's nodes, and with which keys.
    "access_get": ("get", ALLOCATION + "/access", None),
    "key_list": ("get", ALLOCATION + "/authorized-keys", None),
    "key_add": ("post", ALLOCATION + "/authorized-keys", lambda w: {"public_key": MATRIX_KEYS[1]}),
    "key_get": ("get", ALLOCATION + "/authorized-keys/{w.target_key.pk}", None),
    "key_remove": ("delete", ALLOCATION + "/authorized-keys/{w.target_key.pk}", None),
    # Money: a tenant's usage, bill and quota (CCP's metering API).
    "usage_get": ("get", "/api/metering/usage?tenant_id=acme&from=2026-10-01&to=2026-11-01", None),
    "export_csv": ("get", "/api/metering/export/csv?tenant_id=acme&period=2025-10", None),
    "quota_get": ("get", "/api/metering/quota/acme", None),
    "quota_set": ("post", "/api/metering/quota/acme", lambda w: {"gpus": 1}),
    # Allocations: the project's nodes, and CCP's per-node status and release.
    "allocation_list": ("get", A1 + "/allocations", None),
    "allocation_get": ("get", ALLOCATION, None),
    "node_status": ("get", NODE + "/status", None),
    "node_release": ("post", NODE + "/release", lambda w: {"drain": True}),
    # Where a tenant's alerts are sent (webhook receivers).
    "alert_subscribe": (
        "post",
        "/api/alerts/subscribe",
        lambda w: {"tenant_id": "acme", "url": ALERT_RECEIVER, "secret": "another-receiver-secret"},
    ),
    "alert_unsubscribe": ("delete", SUBSCRIPTION, None),
    "alert_test_send": ("post", SUBSCRIPTION + "/test", lambda w: {}),
}

# Statuses in the order of CALLERS:
#   tenant_admin(A), project_admin(A1), viewer(A1), billing_admin(A), tenant_admin(B),
#   service account(A2), platform_admin, platform_integration
EXPECTED = {
    "ccp_onboard": (403, 403, 403, 403, 403, 403, 201, 201),
    "ccp_tenant_get": (200, 200, 200, 200, 404, 200, 200, 200),
    "ccp_project_create": (201, 403, 403, 403, 404, 403, 201, 201),
    "tenant_get": (200, 200, 200, 200, 404, 200, 200, 200),
    "project_list": (200, 200, 200, 200, 200, 200, 200, 200),
    "project_create": (201, 403, 403, 403, 404, 403, 201, 201),
    "project_get": (200, 200, 200, 200, 404, 404, 200, 200),
    "member_list": (200, 200, 200, 403, 404, 404, 200, 200),
    "member_add": (201, 201, 403, 403, 404, 404, 201, 403),
    "member_remove": (204, 204, 403, 403, 404, 404, 204, 403),
    "sa_list": (200, 200, 403, 403, 404, 404, 200, 403),
    "sa_create": (201, 201, 403, 403, 404, 404, 201, 403),
    "sa_get": (200, 200, 403, 403, 404, 404, 200, 403),
    "sa_revoke": (204, 204, 403, 403, 404, 404, 204, 403),
    "audit_list": (200, 403, 403, 403, 200, 403, 200, 403),
    "credential_list": (200, 200, 403, 403, 404, 404, 200, 403),
    "credential_create": (201, 201, 403, 403, 404, 404, 201, 403),
    # Only a project_admin service account of A1 receives it (tests/access/test_access_credentials.py).
    "credential_deliver": (403, 403, 403, 403, 404, 404, 403, 403),
    "credential_delete": (204, 204, 403, 403, 404, 404, 204, 403),
    "secret_list": (200, 200, 403, 403, 404, 404, 200, 403),
    "secret_create": (201, 201, 403, 403, 404, 404, 201, 403),
    "secret_delete": (204, 204, 403, 403, 404, 404, 204, 403),
    "access_get": (200, 200, 403, 403, 404, 404, 200, 200),
    "key_list": (200, 200, 403, 403, 404, 404, 200, 200),
    "key_add": (201, 201, 403, 403, 404, 404, 201, 201),
    "key_get": (200, 200, 403, 403, 404, 404, 200, 200),
    # A machine identity (CCP here) removes only the keys it added; people manage user keys.
    "key_remove": (204, 204, 403, 403, 404, 404, 204, 403),
    # Usage, bills and quotas are the tenant's: tenant-wide roles only, no project role.
    "usage_get": (200, 403, 403, 200, 404, 403, 200, 200),
    "export_csv": (200, 403, 403, 200, 404, 403, 200, 200),
    "quota_get": (200, 403, 403, 200, 404, 403, 200, 200),
    "quota_set": (403, 403, 403, 403, 404, 403, 200, 200),  # CCP's quota sync
    "allocation_list": (200, 200, 200, 403, 404, 404, 200, 200),
    "allocation_get": (200, 200, 200, 403, 404, 404, 200, 200),
    # By node: the caller's own allocations of it; a node one never held is a probe.
    "node_status": (200, 200, 200, 404, 404, 404, 200, 200),
    "node_release": (202, 202, 403, 404, 404, 404, 202, 202),
    # Subscriptions are visible only to who may manage them.
    "alert_subscribe": (201, 403, 403, 403, 404, 403, 201, 201),
    "alert_unsubscribe": (204, 404, 404, 404, 404, 404, 204, 204),
    "alert_test_send": (202, 404, 404, 404, 404, 404, 202, 202),
}
assert set(EXPECTED) == set(ENDPOINTS)
assert all(len(row) == len(CALLERS) for row in EXPECTED.values())

CASES = [
    pytest.param(endpoint, caller, statuses[i], id=f"{endpoint}-{caller}")
    for endpoint, statuses in EXPECTED.items()
    for i, caller in enumerate(CALLERS)
]


def _state(world) -> dict:
    """What a refused request must leave unchanged."""
    return {
        "tenants": Tenant.objects.count(),
        "projects": Project.objects.count(),
        "memberships": Membership.objects.count(),
        "service_accounts": ServiceAccount.objects.count(),
        "revoked": ServiceAccount.objects.filter(revoked_at__isnull=False).count(),
        "access_credentials": AccessCredential.objects.count(),
        "project_secrets": ProjectSecret.objects.count(),
        "keys": list(AuthorizedKey.objects.order_by("pk").values_list("pk", "state")),
        "quotas": list(Quota.objects.order_by("pk").values_list("pk", "limit")),
        "allocations": list(Allocation.objects.order_by("pk").values_list("pk", "state")),
        "billing_exports": BillingExport.objects.count(),
        "alert_subscriptions": AlertSubscription.objects.count(),
        "deliveries": Delivery.objects.count(),
    }


@pytest.mark.parametrize(("endpoint", "caller", "expected"), CASES)
def test_endpoint_answers_per_scope_and_role(api, world, caller_client, endpoint, caller, expected):
    actor = caller_client(caller)
    method, template, body = ENDPOINTS[endpoint]
    last_event = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    before = _state(world)

    kwargs = {"format": "json"} if body else {}
    response = getattr(api, method)(template.format(w=world), body(world) if body else None, **kwargs)

    assert response.status_code == expected, response.content
    denied = AuditEvent.objects.filter(id__gt=last_event, outcome=AuditEvent.Outcome.DENIED, actor=actor)
    if expected >= 400:
        error = response.json()["error"]
        assert error["code"] == {403: "forbidden", 404: "not_found"}[expected]
        assert error["correlation_id"] == response["X-Correlation-ID"]
        assert denied.count() >= 1, "a denied access must be audited"
        assert {e.correlation_id for e in denied} == {response["X-Correlation-ID"]}
        assert _state(world) == before
    else:
        assert not denied.exists()


def test_out_of_scope_answer_is_the_same_as_for_a_missing_object(api, world):
    """A 404 outside the tenant must not tell "exists" from "does not exist"."""
    sign_in(api, world, "other_tenant_admin")
    existing = api.get(f"/api/v1/projects/{world.project.pk}")
    missing = api.get("/api/v1/projects/00000000-0000-4000-8000-000000000000")
    assert existing.status_code == missing.status_code == 404
    strip = lambda r: {k: v for k, v in r.json()["error"].items() if k != "correlation_id"}  # noqa: E731
    assert strip(existing) == strip(missing)
    # Only the probe of an existing object is worth an audit event.
    assert AuditEvent.objects.filter(outcome="denied", target_id=str(world.project.pk)).count() == 1


VISIBLE_PROJECTS = {
    "tenant_admin": {"cell-1", "cell-2"},
    "project_admin": {"cell-1"},
    "viewer": {"cell-1"},
    "billing_admin": {"cell-1", "cell-2"},
    "other_tenant_admin": {"g-1"},
    "other_project_sa": {"cell-2"},
    "platform_admin": {"cell-1", "cell-2", "g-1"},
    "platform_integration": {"cell-1", "cell-2", "g-1"},
}


@pytest.mark.parametrize("caller", CALLERS)
def test_project_list_holds_only_projects_in_scope(api, world, caller_client, caller):
    caller_client(caller)
    response = api.get("/api/v1/projects")
    assert response.status_code == 200
    assert {p["project_id"] for p in response.json()["results"]} == VISIBLE_PROJECTS[caller]


@pytest.mark.parametrize("caller", CALLERS)
def test_tenant_lists_only_the_projects_the_caller_may_see(api, world, caller_client, caller):
    caller_client(caller)
    response = api.get(f"/api/tenants/{world.tenant.tenant_id}")
    if caller == "other_tenant_admin":
        assert response.status_code == 404
        return
    assert response.status_code == 200
    assert {p["project_id"] for p in response.json()["projects"]} == VISIBLE_PROJECTS[caller] - {"g-1"}


def test_tenant_admins_see_only_their_tenants_audit_events(api, world):
    # Activity in both tenants: each admin creates a project in their own tenant.
    sign_in(api, world, "other_tenant_admin")
    assert api.post("/api/v1/projects", {"project_id": "g-2", "name": "G2"}, format="json").status_code == 201
    api.logout()
    sign_in(api, world, "tenant_admin")
    assert (
        api.post("/api/v1/projects", {"project_id": "cell-3", "name": "C3"}, format="json").status_code == 201
    )

    response = api.get("/api/v1/audit", {"page_size": 500})
    assert response.status_code == 200
    events = response.json()["results"]
    assert events
    assert {e["tenant"] for e in events} == {str(world.tenant.pk)}
    created = Project.objects.get(project_id="cell-3")
    assert any(e["action"] == "project.create" and e["target_id"] == str(created.pk) for e in events)
    assert AuditEvent.objects.exclude(tenant_id=world.tenant.pk).exists()  # there was something to hide

    api.logout()
    sign_in(api, world, "other_tenant_admin")
    other = api.get("/api/v1/audit", {"page_size": 500}).json()["results"]
    assert other
    assert {e["tenant"] for e in other} == {str(world.other_tenant.pk)}

    api.logout()
    sign_in(api, world, "platform_admin")
    everything = api.get("/api/v1/audit", {"page_size": 500}).json()
    assert everything["count"] == AuditEvent.objects.count()


def test_audit_filters_narrow_the_callers_events(api, world):
    sign_in(api, world, "tenant_admin")
    api.post("/api/v1/projects", {"project_id": "cell-3", "name": "C3"}, format="json")
    response = api.get("/api/v1/audit", {"action": "project.create"})
    assert response.status_code == 200
    assert [e["action"] for e in response.json()["results"]] == ["project.create"]
    by_project = api.get("/api/v1/audit", {"project": str(world.project.pk)}).json()["results"]
    assert by_project
    assert {e["project"] for e in by_project} == {str(world.project.pk)}
    bad = api.get("/api/v1/audit", {"project": "not-a-uuid"})
    assert bad.status_code == 400
    assert "project" in bad.json()["error"]["details"]
    bad_time = api.get("/api/v1/audit", {"from": "yesterday"})
    assert bad_time.status_code == 400
    assert "from" in bad_time.json()["error"]["details"]


@pytest.mark.parametrize(
    ("ccp_role", "project_claim", "expected"),
    [
        ("Cell Administrator", "cell-2", 404),  # a project role acts only on its own project
        ("Cell Viewer", "cell-1", 200),
        ("Tenant Administrator", "cell-2", 200),  # tenant-wide roles act on every project
        ("Tenant Billing Admin", None, 200),
    ],
)
def test_ccp_token_roles_follow_the_same_rule(api, world, ccp_issuer, ccp_role, project_claim, expected):
    claims = {"roles": [ccp_role], "domain_id": "acme"}
    if project_claim:
        claims["project_id"] = project_claim
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token(claims)}")
    assert api.get(f"/api/v1/projects/{world.project.pk}").status_code == expected
    # A token of tenant A never reaches tenant B.
    assert api.get(f"/api/v1/projects/{world.other_tenant_project.pk}").status_code == 404
