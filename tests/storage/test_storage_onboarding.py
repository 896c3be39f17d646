"""Onboarding a tenant through CCP's API makes its storage: the directory at the tier's
quota, and its partition key; against the simulated and the real drivers."""

from __future__ import annotations

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_onboarding_a_tenant_makes_its_directory_and_partition_key(
    api, ccp_issuer, storage_backend, django_capture_on_commit_callbacks
):
    integration = {
        "HTTP_AUTHORIZATION": f"Bearer {ccp_issuer.token({'roles': ['GPUaaS Platform Integration']})}"
    }
    call_command("load_vrf_pool", count=1, first_vni=50001, first_vlan=1000, prefix="vrf")
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post(
            "/api/tenants",
            {"tenant_id": "acme.research", "name": "Acme", "realm_name": "acme", "tier": "premium"},
            format="json",
            **integration,
        )
    assert created.status_code == 201, created.content
    tenant = api.get("/api/tenants/acme.research", **integration).json()
    assert tenant["status"] == "active"
    storage = tenant["storage"]
    assert (storage["path"], storage["status"], storage["quota_gb"]) == (
        "/lustre/acme.research/",
        "ready",
        51200,
    )
    assert storage_backend.quota_gb("/lustre/acme.research/") == 51200
    assert storage_backend.has_pkey(storage["pkey"])
