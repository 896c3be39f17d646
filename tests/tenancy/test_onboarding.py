"""CCP onboards tenants: POST /api/tenants and POST /api/tenants/{tenant_id}/projects."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.core.models import AuditEvent
from apps.networking.services import load_pool
from apps.tenancy.models import Project, Quota, Tenant
from apps.tenancy.quotas import default_quota
from tests.support.concurrency import at_once
from tests.support.world import INTEGRATION_ROLE

CORRELATION = "onboard-0001.abc"


@pytest.fixture
def vrf_pool(db):
    """Onboarding takes a VRF from the operators' pool."""
    load_pool(prefix="test-vrf", count=4, first_vni=50000, first_vlan=1000)


@pytest.fixture
def ccp(api, ccp_issuer):
    """``api`` speaking as CCP's platform integration."""
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token({'roles': [INTEGRATION_ROLE]})}")
    return api


def onboard_body(**overrides):
    body = {"tenant_id": "newco", "name": "NewCo", "realm_name": "newco-realm"}
    body.update(overrides)
    return body


@pytest.mark.django_db
def test_onboarding_creates_the_tenant_then_activates_it(ccp, vrf_pool, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = ccp.post("/api/tenants", onboard_body(), format="json")
        assert response.status_code == 201, response.content
        created = response.json()
        # The provisioning task runs after commit: the answer shows the tenant still onboarding.
        assert created["status"] == "onboarding"
    assert len(callbacks) == 1

    shown = ccp.get("/api/tenants/newco")
    assert shown.status_code == 200
    tenant = shown.json()
    assert tenant["id"] == created["id"]
    assert tenant["tenant_id"] == "newco"
    assert tenant["status"] == "active"
    assert tenant["status_reason"] == ""
    assert tenant["realm_name"] == "newco-realm"
    assert tenant["tier"] == "standard"
    assert [(p["project_id"], p["name"]) for p in tenant["projects"]] == [("default", "Default")]
    assert tenant["quota"] == default_quota()
    assert {"network", "storage"} <= set(tenant)


@pytest.mark.django_db
def test_onboarding_keeps_the_given_projects_and_merges_quota_over_defaults(ccp):
    body = onboard_body(
        tier="premium",
        quota={"gpus": 16, "racks": 2},
        projects=[{"project_id": "cell-a", "name": "Cell A"}, {"project_id": "cell-b", "name": "Cell B"}],
    )
    response = ccp.post("/api/tenants", body, format="json")
    assert response.status_code == 201, response.content
    tenant = response.json()
    assert tenant["tier"] == "premium"
    assert sorted(p["project_id"] for p in tenant["projects"]) == ["cell-a", "cell-b"]
    assert all(p["id"] for p in tenant["projects"])
    assert tenant["quota"] == {**default_quota(), "gpus": 16, "racks": 2}
    stored = dict(Quota.objects.filter(tenant__tenant_id="newco").values_list("resource", "limit"))
    assert stored == tenant["quota"]


@pytest.mark.django_db
def test_onboarding_the_same_tenant_again_returns_it_unchanged(ccp):
    first = ccp.post("/api/tenants", onboard_body(quota={"gpus": 16}), format="json")
    assert first.status_code == 201
    counts = (Tenant.objects.count(), Project.objects.count(), Quota.objects.count())
    events = AuditEvent.objects.filter(action="tenant.onboard").count()

    again = ccp.post(
        "/api/tenants",
        onboard_body(name="Renamed", quota={"gpus": 99}, projects=[{"project_id": "x", "name": "X"}]),
        format="json",
    )
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["name"] == "NewCo"
    assert again.json()["quota"]["gpus"] == 16
    assert (Tenant.objects.count(), Project.objects.count(), Quota.objects.count()) == counts
    assert AuditEvent.objects.filter(action="tenant.onboard").count() == events


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (onboard_body(tenant_id="bad id!"), "tenant_id"),
        (onboard_body(tenant_id="x" * 65), "tenant_id"),
        (onboard_body(tenant_id=""), "tenant_id"),
        (onboard_body(quota={"gpus": -1}), "quota"),
        (onboard_body(quota={"gpus": "many"}), "quota"),
        (onboard_body(quota={"bad name!": 1}), "quota"),
        (
            onboard_body(projects=[{"project_id": "a", "name": "A"}, {"project_id": "a", "name": "B"}]),
            "projects",
        ),
        (onboard_body(projects=[{"project_id": "a/b", "name": "A"}]), "projects"),
        ({"tenant_id": "newco", "name": "NewCo"}, "realm_name"),
    ],
    ids=[
        "bad-chars",
        "too-long",
        "empty",
        "negative-quota",
        "non-integer-quota",
        "bad-resource",
        "duplicate-projects",
        "bad-project-id",
        "missing-realm",
    ],
)
def test_invalid_onboarding_answers_validation_error_with_field_details(ccp, body, field):
    response = ccp.post("/api/tenants", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]
    assert error["details"][field]
    assert not Tenant.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "roles",
    [
        ["Tenant Super Administrator"],
        ["Tenant Administrator"],
        ["Cell Administrator"],
        ["Tenant Viewer"],
        ["Tenant Billing Admin"],
        [],
        ["GPUaaS Platform Integrator"],
    ],
)
def test_only_the_platform_integration_may_onboard(api, ccp_issuer, tenant, roles):
    token = ccp_issuer.token({"roles": roles, "domain_id": tenant.tenant_id})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = api.post("/api/tenants", onboard_body(), format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert not Tenant.objects.filter(tenant_id="newco").exists()
    assert AuditEvent.objects.filter(action="tenant.onboard", outcome="denied").count() == 1
    # Refused before validation: an invalid body tells an unauthorized caller nothing more.
    assert api.post("/api/tenants", {}, format="json").status_code == 403


@pytest.mark.django_db
def test_onboarding_accepts_a_token_naming_the_tenant_being_onboarded(api, ccp_issuer):
    token = ccp_issuer.token({"roles": [INTEGRATION_ROLE], "domain_id": "newco"})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.post("/api/tenants", onboard_body(), format="json").status_code == 201
    # Elsewhere an unknown domain_id is refused.
    unknown = ccp_issuer.token({"roles": [INTEGRATION_ROLE], "domain_id": "nobody"})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {unknown}")
    assert api.get("/api/tenants/newco").status_code == 401


@pytest.mark.django_db
def test_unknown_tenant_answers_not_found(ccp):
    response = ccp.get("/api/tenants/nobody")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert (
        ccp.post("/api/tenants/nobody/projects", {"project_id": "p", "name": "P"}, format="json").status_code
        == 404
    )


@pytest.mark.django_db
def test_adding_a_project_is_idempotent_per_project_id(ccp):
    ccp.post("/api/tenants", onboard_body(), format="json")
    first = ccp.post("/api/tenants/newco/projects", {"project_id": "cell-9", "name": "Cell 9"}, format="json")
    assert first.status_code == 201, first.content
    assert first.json()["project_id"] == "cell-9"
    assert first.json()["tenant_id"] == "newco"
    again = ccp.post("/api/tenants/newco/projects", {"project_id": "cell-9", "name": "Other"}, format="json")
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["name"] == "Cell 9"
    assert Project.objects.filter(tenant__tenant_id="newco", project_id="cell-9").count() == 1
    assert AuditEvent.objects.filter(action="project.create", target_id=first.json()["id"]).count() == 1
    listed = ccp.get("/api/tenants/newco").json()["projects"]
    assert {p["project_id"] for p in listed} == {"default", "cell-9"}


@pytest.mark.django_db
def test_adding_a_project_validates_its_body(ccp):
    ccp.post("/api/tenants", onboard_body(), format="json")
    response = ccp.post("/api/tenants/newco/projects", {"project_id": "no spaces", "name": ""}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"project_id", "name"}


@pytest.mark.django_db(transaction=True)
def test_onboarding_audit_events_carry_the_request_correlation_id(ccp, vrf_pool):
    # transaction=True: the provisioning task runs on the real commit, inside the request.
    response = ccp.post(
        "/api/tenants",
        onboard_body(),
        format="json",
        HTTP_X_CORRELATION_ID=CORRELATION,
        REMOTE_ADDR="10.9.8.7",
    )
    assert response.status_code == 201
    assert response["X-Correlation-ID"] == CORRELATION
    tenant = Tenant.objects.get(tenant_id="newco")
    assert tenant.status == Tenant.Status.ACTIVE

    onboard = AuditEvent.objects.get(action="tenant.onboard")
    assert (onboard.outcome, onboard.actor_type, onboard.target_type) == ("success", "federated", "tenant")
    assert onboard.tenant_id == tenant.pk
    assert onboard.target_id == str(tenant.pk)
    assert onboard.correlation_id == CORRELATION
    assert onboard.source_ip == "10.9.8.7"
    activated = AuditEvent.objects.get(action="tenant.active")
    assert (activated.actor, activated.actor_type) == ("platform", "system")
    assert activated.correlation_id == CORRELATION


@pytest.mark.django_db(transaction=True)
@pytest.mark.production
def test_concurrent_onboarding_of_one_tenant_creates_it_once(ccp_issuer, vrf_pool):
    token = ccp_issuer.token({"roles": [INTEGRATION_ROLE]})
    # Fetch the issuer's keys first: this test is about onboarding, not a cold key cache.
    warm = APIClient()
    warm.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert warm.get("/api/tenants/newco").status_code == 404
    threads_count = 4

    def onboard():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client.post("/api/tenants", onboard_body(), format="json")

    responses = at_once([onboard] * threads_count)
    assert sorted(r.status_code for r in responses) == [200] * (threads_count - 1) + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert Tenant.objects.filter(tenant_id="newco").count() == 1
    assert Project.objects.filter(tenant__tenant_id="newco").count() == 1
    assert Quota.objects.filter(tenant__tenant_id="newco").count() == len(default_quota())
    assert AuditEvent.objects.filter(action="tenant.onboard").count() == 1
    assert Tenant.objects.get(tenant_id="newco").status == Tenant.Status.ACTIVE
