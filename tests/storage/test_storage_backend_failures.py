"""POST /api/storage/tenant while DDN or UFM fails: 503 with Retry-After, and a
retry that finishes the work once; against the simulated and the real drivers."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.storage import services
from apps.storage.models import TenantStorage

pytestmark = pytest.mark.django_db


@pytest.fixture
def integration(ccp_issuer):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"], "preferred_username": "ccp-sync"})
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def create_storage(api, integration, tenant, key="storage-acme-1"):
    return api.post(
        "/api/storage/tenant",
        {"tenant_id": tenant.tenant_id},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
        **integration,
    )


@pytest.mark.parametrize(("system", "operation"), [("ddn", "create_directory"), ("ufm", "create_pkey")])
def test_backend_failure_answers_503_and_the_retry_provisions_once(
    api, integration, tenant, system, operation, storage_backend
):
    trouble = storage_backend.fail_once(system, operation)

    failed = create_storage(api, integration, tenant)
    assert failed.status_code == 503, failed.content
    assert int(failed["Retry-After"]) > 0
    error = failed.json()["error"]
    assert error["code"] == "unavailable"
    assert trouble in error["message"]
    assert "Traceback" not in failed.content.decode()
    assert TenantStorage.objects.get(tenant=tenant).status == TenantStorage.Status.PROVISIONING

    retried = create_storage(api, integration, tenant)
    assert retried.status_code == 201, retried.content
    assert "Idempotent-Replayed" not in retried
    assert retried.json()["status"] == "ready"
    assert retried.json()["path"] == "/lustre/acme/"
    replayed = create_storage(api, integration, tenant)
    assert replayed.status_code == 201
    assert replayed["Idempotent-Replayed"] == "true"

    assert TenantStorage.objects.count() == 1
    assert storage_backend.quota_gb("/lustre/acme/") == retried.json()["quota_gb"]
    assert storage_backend.has_pkey(retried.json()["pkey"])
    # The failed attempt and the one that provisioned, both in the caller's name.
    failure, success = AuditEvent.objects.filter(action="storage.provision").order_by("occurred_at", "id")
    assert failure.outcome == "failure"
    assert trouble in failure.details["reason"]
    assert (success.outcome, success.actor, success.actor_type) == ("success", "ccp-sync", "federated")
    assert failure.actor == "ccp-sync"
    assert success.tenant_id == tenant.pk


def test_storage_made_by_onboarding_is_audited_as_the_platform_and_answered_as_existing(
    api, integration, tenant, storage_backend
):
    services.provision_tenant_storage(tenant)
    response = create_storage(api, integration, tenant)
    assert response.status_code == 200
    assert response.json()["status"] == "ready"
    [event] = AuditEvent.objects.filter(action="storage.provision")
    assert event.actor == "platform"


def test_when_partition_keys_run_out_the_answer_is_503_and_nothing_is_reserved(
    api, integration, tenant, other_tenant_project
):
    TenantStorage.objects.create(
        tenant=other_tenant_project.tenant,
        tier="standard",
        path="/lustre/x/",
        nodemap="nm-x",
        pkey="7fff",
        quota_gb=1,
    )
    refused = create_storage(api, integration, tenant)
    assert refused.status_code == 503
    assert "no free PKey" in refused.json()["error"]["message"]
    assert not TenantStorage.objects.filter(tenant=tenant).exists()
