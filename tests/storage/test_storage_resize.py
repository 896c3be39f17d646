"""POST /api/storage/tenant with a new quota_gb resizes the tenant's directory on DDN:
the tenant's storage quota applied, shrinking below what is used refused, audited,
and safe to retry. Each against the simulated and the real drivers (``storage_backend``)."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.storage import services
from apps.storage.models import StorageResize, TenantStorage
from apps.tenancy import quotas
from apps.tenancy.principal import for_user
from tests.support.concurrency import at_once

pytestmark = pytest.mark.django_db

GB = 2**30
PATH = "/lustre/acme/"


@pytest.fixture
def integration(ccp_issuer):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"], "preferred_username": "ccp-sync"})
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def storage(storage_backend, tenant):
    """1,000 GB of a 5,000 GB tenant quota."""
    made = services.provision_tenant_storage(tenant, quota_gb=1000)
    quotas.set_quota(tenant, {"storage_gb": 5000})
    return made


def resize(api, integration, quota_gb, key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post(
        "/api/storage/tenant",
        {"tenant_id": "acme", "quota_gb": quota_gb},
        format="json",
        **headers,
        **integration,
    )


def test_growing_asks_ddn_and_records_the_new_size(api, integration, storage, storage_backend):
    response = resize(api, integration, 3000)
    assert response.status_code == 200, response.content
    assert response.json()["quota_gb"] == 3000
    assert response.json()["path"] == PATH
    assert storage_backend.quota_gb(PATH) == 3000
    assert TenantStorage.objects.get(pk=storage.pk).quota_gb == 3000
    [change] = StorageResize.objects.all()
    assert (change.from_gb, change.to_gb, change.resized_by) == (1000, 3000, "ccp-sync")
    event = AuditEvent.objects.get(action="storage.resize")
    assert (event.outcome, event.actor, event.details) == (
        "success",
        "ccp-sync",
        {"from_gb": 1000, "to_gb": 3000},
    )
    assert quotas.usage_of(storage.tenant)["storage_gb"] == 3000


def test_growing_past_the_tenant_quota_is_422_and_changes_nothing(api, integration, storage, storage_backend):
    response = resize(api, integration, 5001)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"resource": "storage_gb", "limit": 5000, "used": 1000, "requested": 4001}
    assert storage_backend.quota_gb(PATH) == 1000
    assert TenantStorage.objects.get(pk=storage.pk).quota_gb == 1000
    assert not StorageResize.objects.exists()
    assert AuditEvent.objects.get(action="storage.resize").outcome == "denied"
    assert resize(api, integration, 5000).status_code == 200  # exactly the limit is allowed


def test_shrinking_is_allowed_down_to_what_the_files_use_and_no_further(
    api, integration, storage, storage_backend
):
    storage_backend.fill(PATH, 300 * GB + 1)
    refused = resize(api, integration, 300)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "validation_error"
    assert "301 GB" in error["details"]["quota_gb"][0]
    assert storage_backend.quota_gb(PATH) == 1000
    denial = AuditEvent.objects.get(action="storage.resize")
    assert (denial.outcome, denial.details["reason"]) == ("denied", "below_used")

    shrunk = resize(api, integration, 301)
    assert shrunk.status_code == 200
    assert storage_backend.quota_gb(PATH) == 301
    assert TenantStorage.objects.get(pk=storage.pk).quota_gb == 301


def test_a_retry_and_the_same_size_again_change_nothing(api, integration, storage):
    first = resize(api, integration, 2000, key="resize-1")
    replay = resize(api, integration, 2000, key="resize-1")
    assert replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    again = resize(api, integration, 2000, key="resize-2")  # a new key, the size it has
    assert again.status_code == 200
    assert StorageResize.objects.count() == 1
    assert AuditEvent.objects.filter(action="storage.resize").count() == 1


def test_ddn_failing_answers_503_and_leaves_the_old_size(api, integration, storage, storage_backend):
    trouble = storage_backend.fail_once("ddn", "set_quota")
    failed = resize(api, integration, 2000)
    assert failed.status_code == 503
    assert int(failed["Retry-After"]) > 0
    assert trouble in failed.json()["error"]["message"]
    assert TenantStorage.objects.get(pk=storage.pk).quota_gb == 1000
    assert not StorageResize.objects.exists()
    assert AuditEvent.objects.get(action="storage.resize").outcome == "failure"
    assert resize(api, integration, 2000).status_code == 200
    assert storage_backend.quota_gb(PATH) == 2000


def test_creating_storage_with_a_quota_takes_tenant_quota(api, integration, tenant, storage_backend):
    quotas.set_quota(tenant, {"storage_gb": 500})
    refused = resize(api, integration, 501)
    assert refused.status_code == 422
    assert not TenantStorage.objects.exists()
    created = resize(api, integration, 500)
    assert created.status_code == 201
    assert created.json()["quota_gb"] == 500


def test_a_tenant_role_without_storage_rights_cannot_resize(api, ccp_issuer, storage, storage_backend):
    admin = ccp_issuer.token({"domain_id": "acme", "roles": ["Tenant Administrator"]})
    response = resize(api, {"HTTP_AUTHORIZATION": f"Bearer {admin}"}, 2000)
    assert response.status_code == 403
    other = ccp_issuer.token({"domain_id": "globex", "roles": ["Tenant Administrator"]})
    assert resize(api, {"HTTP_AUTHORIZATION": f"Bearer {other}"}, 2000).status_code in (401, 404)
    assert storage_backend.quota_gb(PATH) == 1000


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_two_resizes_at_once_leave_ddn_at_the_size_recorded_last(storage, platform_admin, storage_backend):
    operator = for_user(platform_admin)
    at_once(
        [
            lambda size=size: services.resize_tenant_storage(operator, storage.tenant, size)
            for size in (3000, 4000)
        ]
    )
    recorded = TenantStorage.objects.get(pk=storage.pk).quota_gb
    assert recorded in (3000, 4000)
    assert storage_backend.quota_gb(PATH) == recorded
    first, second = StorageResize.objects.order_by("resized_at")
    assert (first.from_gb, first.to_gb, second.from_gb, second.to_gb) == (
        1000,
        second.from_gb,
        first.to_gb,
        recorded,
    )


def test_a_half_done_storage_is_finished_at_the_size_asked(api, integration, tenant, storage_backend):
    storage_backend.fail_once("ufm", "create_pkey")
    assert resize(api, integration, 700).status_code == 503
    TenantStorage.objects.filter(tenant=tenant).update(quota_gb=600)  # reserved at another size
    finished = resize(api, integration, 800)
    assert finished.status_code == 201
    assert finished.json()["quota_gb"] == 800
    assert storage_backend.quota_gb(PATH) == 800
