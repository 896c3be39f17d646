"""Tenant networks from the pre-created VRF pool, and tenant storage on DDN/UFM."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from apps.core import simulation
from apps.networking.models import Vrf
from apps.storage.models import TenantStorage
from apps.tenancy.models import Tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def integration(ccp_issuer):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def onboard(api, integration, tenant_id, capture):
    with capture(execute=True):
        response = api.post(
            "/api/tenants",
            {"tenant_id": tenant_id, "name": tenant_id.title(), "realm_name": tenant_id},
            format="json",
            **integration,
        )
    assert response.status_code == 201, response.content
    return api.get(f"/api/tenants/{tenant_id}", **integration).json()


def test_onboarding_takes_a_vrf_and_creates_storage(api, integration, django_capture_on_commit_callbacks):
    call_command("load_vrf_pool", count=2, first_vni=50001, first_vlan=1000, prefix="vrf")
    tenant = onboard(api, integration, "acme", django_capture_on_commit_callbacks)
    assert tenant["status"] == "active"
    assert tenant["network"]["vrf"] == "vrf-0001"
    assert {v["purpose"]: v["vlan_id"] for v in tenant["network"]["vlans"]} == {
        "control_plane": 1000,
        "gpu_worker": 1001,
        "lb": 1002,
        "reserved": 1003,
    }
    assert tenant["storage"] == {
        "path": "/lustre/acme/",
        "nodemap": "nm-acme",
        "pkey": "0100",
        "quota_gb": 10240,
        "status": "ready",
    }
    assert simulation.get("ddn", "directory", "/lustre/acme/").state["quota_gb"] == 10240
    assert simulation.get("ufm", "pkey", "0100") is not None


def test_no_two_tenants_share_a_vrf_and_empty_pool_waits_for_capacity(
    api, integration, django_capture_on_commit_callbacks
):
    call_command("load_vrf_pool", count=1, first_vni=50001, first_vlan=1000, prefix="vrf")
    first = onboard(api, integration, "acme", django_capture_on_commit_callbacks)
    second = onboard(api, integration, "globex", django_capture_on_commit_callbacks)
    assert first["status"] == "active"
    assert second["status"] == "onboarding"
    assert "VRF pool is empty" in second["status_reason"]

    with django_capture_on_commit_callbacks(execute=True):
        call_command("load_vrf_pool", count=2, first_vni=50001, first_vlan=1000, prefix="vrf")
    second = api.get("/api/tenants/globex", **integration).json()
    assert second["status"] == "active"
    assert second["status_reason"] == ""
    assert second["network"]["vrf"] != first["network"]["vrf"]


def test_vpc_api_is_idempotent_and_answers_503_when_pool_is_empty(
    api, integration, django_capture_on_commit_callbacks
):
    call_command("load_vrf_pool", count=2, first_vni=50001, first_vlan=1000, prefix="vrf")
    onboard(api, integration, "acme", django_capture_on_commit_callbacks)
    body = {"tenant_id": "acme", "vpc_id": "vpc-1"}
    first = api.post("/api/network-manager/vpc", body, format="json", **integration)
    assert first.status_code == 201
    assert first.json()["vpc_id"] == "vpc-1"
    assert len(first.json()["vlans"]) == 4
    again = api.post("/api/network-manager/vpc", body, format="json", **integration)
    assert again.status_code == 200
    assert again.json()["name"] == first.json()["name"]
    second_vpc = api.post(
        "/api/network-manager/vpc", {"tenant_id": "acme", "vpc_id": "vpc-2"}, format="json", **integration
    )
    assert second_vpc.status_code == 201
    assert second_vpc.json()["name"] != first.json()["name"]
    exhausted = api.post(
        "/api/network-manager/vpc", {"tenant_id": "acme", "vpc_id": "vpc-3"}, format="json", **integration
    )
    assert exhausted.status_code == 503
    assert exhausted.json()["error"]["code"] == "unavailable"
    assert int(exhausted["Retry-After"]) > 0


def test_deleting_a_tenant_returns_its_vrfs(api, integration, django_capture_on_commit_callbacks):
    call_command("load_vrf_pool", count=1, first_vni=50001, first_vlan=1000, prefix="vrf")
    onboard(api, integration, "acme", django_capture_on_commit_callbacks)
    api.post(
        "/api/network-manager/vpc", {"tenant_id": "acme", "vpc_id": "vpc-1"}, format="json", **integration
    )
    Tenant.objects.get(tenant_id="acme").delete()
    vrf = Vrf.objects.get()
    assert vrf.tenant is None
    assert vrf.vpc_id == ""


def test_storage_api_is_idempotent_per_tenant(api, integration, django_capture_on_commit_callbacks):
    call_command("load_vrf_pool", count=1, first_vni=50001, first_vlan=1000, prefix="vrf")
    onboard(api, integration, "acme", django_capture_on_commit_callbacks)
    response = api.post("/api/storage/tenant", {"tenant_id": "acme"}, format="json", **integration)
    assert response.status_code == 200  # onboarding already made it
    assert response.json()["path"] == "/lustre/acme/"
    assert TenantStorage.objects.count() == 1


def test_tenant_roles_cannot_create_networks(api, ccp_issuer, tenant):
    token = ccp_issuer.token({"domain_id": tenant.tenant_id, "roles": ["Tenant Administrator"]})
    response = api.post(
        "/api/network-manager/vpc",
        {"tenant_id": tenant.tenant_id, "vpc_id": "v"},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 403
