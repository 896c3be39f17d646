"""App instances count against the tenant's ``app_instances`` quota, checked where
allocations check theirs (``quotas.enforce``): 422 past it, the refusal audited, and
a deleted instance gives its place back."""

from __future__ import annotations

import pytest

from apps.core.errors import QuotaExceeded
from apps.core.models import AuditEvent
from apps.runtime import services
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from tests.support.concurrency import at_once
from tests.support.instances import ask_launch

pytestmark = pytest.mark.django_db


def test_a_launch_past_the_app_instance_quota_is_refused_and_audited(
    api, allocator, project, jupyterlab, active_allocation, ready_tenant
):
    quotas.set_quota(ready_tenant, {"app_instances": 2})
    api.force_login(allocator)
    assert ask_launch(api, project, active_allocation).status_code == 202
    assert ask_launch(api, project, active_allocation).status_code == 202

    refused = ask_launch(api, project, active_allocation)
    assert refused.status_code == 422, refused.content
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"resource": "app_instances", "limit": 2, "used": 2, "requested": 1}
    assert AppInstance.objects.filter(project=project).count() == 2  # nothing half-made
    denial = AuditEvent.objects.get(action="instance.launch", outcome="denied")
    assert denial.details["resource"] == "app_instances"
    assert denial.actor == allocator.username


def test_stopped_and_failed_instances_hold_their_place_a_deleted_one_gives_it_back(
    api, allocator, project, jupyterlab, active_allocation, ready_tenant
):
    quotas.set_quota(ready_tenant, {"app_instances": 1})
    api.force_login(allocator)
    first = AppInstance.objects.get(pk=ask_launch(api, project, active_allocation).json()["instance_id"])
    for state in (AppInstance.State.STOPPED, AppInstance.State.FAILED):
        AppInstance.objects.filter(pk=first.pk).update(state=state)
        assert ask_launch(api, project, active_allocation).status_code == 422
    AppInstance.objects.filter(pk=first.pk).update(state=AppInstance.State.DELETED)
    assert ask_launch(api, project, active_allocation).status_code == 202


def test_the_quota_api_reports_app_instances(
    api, ccp_issuer, allocator, project, jupyterlab, active_allocation
):
    quotas.set_quota(project.tenant, {"app_instances": 4})
    api.force_login(allocator)
    ask_launch(api, project, active_allocation)
    api.logout()
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    report = api.get(f"/api/metering/quota/{project.tenant.tenant_id}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert report.json()["resources"]["app_instances"] == {
        "limit": 4,
        "used": 1,
        "percent": 25.0,
        "warning": "none",
    }


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_two_launches_at_once_cannot_both_take_the_last_place(
    allocator, project, jupyterlab, active_allocation, ready_tenant
):
    quotas.set_quota(ready_tenant, {"app_instances": 1})
    principal = principals.for_user(allocator)

    def launch_one():
        return services.launch(principal, project, app_slug="jupyterlab", allocation_id=active_allocation.pk)

    results = at_once([launch_one, launch_one], answers=(QuotaExceeded,))
    assert sorted(type(result).__name__ for result in results) == ["Operation", "QuotaExceeded"]
    assert AppInstance.objects.filter(project=project).count() == 1
