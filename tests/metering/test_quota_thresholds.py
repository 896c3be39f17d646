"""Crossing 80 % or 90 % of a quota is recorded once per crossing and announced with
``quota_threshold_crossed`` (monitoring turns it into a ``quota`` or
``storage_quota`` alert); falling back clears it and arms it again."""

from __future__ import annotations

import pytest

from apps.allocations import services as allocations
from apps.allocations.models import Allocation
from apps.core import simulation
from apps.core.models import SimulatedFault
from apps.metering import services as metering
from apps.metering import signals
from apps.metering.models import QuotaCrossing
from apps.metering.services import check_quota_thresholds
from apps.metering.tasks import sweep_quota_thresholds
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from celery_worker.schedule import beat_schedule
from tests.factories import AllocationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def announced():
    """What a listener above metering (the monitoring app) is told."""
    heard = []

    def crossed(sender, **kwargs):
        heard.append(("crossed", kwargs["resource"], kwargs["level"], kwargs["rule"], kwargs["percent"]))

    def cleared(sender, **kwargs):
        heard.append(("cleared", kwargs["resource"], kwargs["level"], kwargs["rule"], kwargs["percent"]))

    signals.quota_threshold_crossed.connect(crossed)
    signals.quota_threshold_cleared.connect(cleared)
    yield heard
    signals.quota_threshold_crossed.disconnect(crossed)
    signals.quota_threshold_cleared.disconnect(cleared)


def hold(project, flavor, count):
    return [AllocationFactory(project=project, node__flavor=flavor) for _ in range(count)]


def check(tenant, capture):
    with capture(execute=True):
        return check_quota_thresholds(tenant)


def test_each_crossing_is_raised_once_and_rearmed_when_usage_drops(
    tenant, project, flavor, announced, django_capture_on_commit_callbacks
):
    quotas.set_quota(tenant, {"nodes": 10})
    held = hold(project, flavor, 8)
    [crossing] = check(tenant, django_capture_on_commit_callbacks)
    assert (crossing.resource, crossing.level, crossing.used, crossing.limit) == ("nodes", "80", 8, 10)
    assert check(tenant, django_capture_on_commit_callbacks) == []  # still at 80 %: not again
    assert announced == [("crossed", "nodes", "80", "quota", 80.0)]

    hold(project, flavor, 1)
    check(tenant, django_capture_on_commit_callbacks)
    assert announced[-1] == ("crossed", "nodes", "90", "quota", 90.0)

    Allocation.objects.filter(pk__in=[a.pk for a in held[:3]]).update(state=Allocation.State.RELEASED)
    check(tenant, django_capture_on_commit_callbacks)  # 6 of 10: below both
    assert announced[-1] == ("cleared", "nodes", "none", "quota", 60.0)
    assert not QuotaCrossing.objects.filter(cleared_at__isnull=True).exists()

    hold(project, flavor, 2)
    check(tenant, django_capture_on_commit_callbacks)  # 80 % again: armed again, raised again
    assert announced[-1] == ("crossed", "nodes", "80", "quota", 80.0)
    assert QuotaCrossing.objects.filter(level="80").count() == 2


def test_a_tenant_keeps_its_newest_cleared_crossings(
    tenant, project, flavor, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(metering, "CLEARED_CROSSINGS_KEPT", 2)
    quotas.set_quota(tenant, {"nodes": 10})
    for _ in range(4):  # up past 80 % and back down, again and again
        held = hold(project, flavor, 8)
        check(tenant, django_capture_on_commit_callbacks)
        Allocation.objects.filter(pk__in=[a.pk for a in held]).update(state=Allocation.State.RELEASED)
        check(tenant, django_capture_on_commit_callbacks)
    assert QuotaCrossing.objects.filter(tenant=tenant).count() == 2


def test_a_filling_directory_is_a_storage_quota_alert_and_its_size_a_quota_one(
    tenant, announced, django_capture_on_commit_callbacks
):
    directory = storage.provision_tenant_storage(tenant, quota_gb=950)
    quotas.set_quota(tenant, {"storage_gb": 1000})
    check(tenant, django_capture_on_commit_callbacks)
    assert announced == [("crossed", "storage_gb", "90", "quota", 95.0)]

    with simulation.locked(
        "ddn", "directory", directory.path
    ) as state:  # the tenant's files, as DDN counts them
        simulation.update(state, used_bytes=800 * 2**30)
    check(tenant, django_capture_on_commit_callbacks)
    assert announced[-1] == ("crossed", "storage_used_gb", "80", "storage_quota", 84.2)
    crossing = QuotaCrossing.objects.get(resource="storage_used_gb")
    assert (crossing.used, crossing.limit) == (800, 950)


def test_ddn_not_answering_leaves_the_directory_level_alone(
    tenant, announced, django_capture_on_commit_callbacks
):
    directory = storage.provision_tenant_storage(tenant, quota_gb=100)
    with simulation.locked("ddn", "directory", directory.path) as state:
        simulation.update(state, used_bytes=99 * 2**30)
    SimulatedFault.objects.create(system="ddn", operation="used_bytes", message="MGS down")
    assert check(tenant, django_capture_on_commit_callbacks) == []
    SimulatedFault.objects.all().delete()
    [crossing] = check(tenant, django_capture_on_commit_callbacks)
    assert (crossing.resource, crossing.level) == ("storage_used_gb", "90")


def test_an_allocation_taking_quota_checks_at_once(
    ready_tenant, allocator, project, nodes, announced, django_capture_on_commit_callbacks
):
    quotas.set_quota(ready_tenant, {"nodes": 1, "gpus": 64})
    with django_capture_on_commit_callbacks(execute=True):
        allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
    assert ("crossed", "nodes", "90", "quota", 100.0) in announced


def test_the_sweep_rearms_what_a_release_gave_back(
    tenant, project, flavor, announced, django_capture_on_commit_callbacks
):
    quotas.set_quota(tenant, {"gpus": 10})
    [allocation] = hold(project, flavor, 1)  # 8 GPUs of 10
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep_quota_thresholds() == 1
    Allocation.objects.filter(pk=allocation.pk).update(state=Allocation.State.RELEASED)
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep_quota_thresholds() == 0
    assert QuotaCrossing.objects.get().cleared_at is not None
    assert [event[0] for event in announced] == ["crossed", "cleared"]
    assert quotas.usage_of(tenant)["gpus"] == 0


def test_a_tenant_without_limits_raises_nothing(tenant, project, flavor, django_capture_on_commit_callbacks):
    hold(project, flavor, 3)
    assert check(tenant, django_capture_on_commit_callbacks) == []
    assert not QuotaCrossing.objects.exists()


def test_a_lower_limit_from_ccp_raises_the_crossing_and_the_sweep_runs_every_minute(
    api, ccp_issuer, tenant, project, flavor, announced, django_capture_on_commit_callbacks
):
    hold(project, flavor, 1)  # 8 GPUs
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/metering/quota/acme", {"gpus": 9}, format="json", HTTP_AUTHORIZATION=f"Bearer {token}"
        )
    assert response.json()["resources"]["gpus"]["warning"] == "80"
    assert announced == [("crossed", "gpus", "80", "quota", 88.9)]
    [entry] = [e for e in beat_schedule().values() if e["task"] == sweep_quota_thresholds.name]
    assert entry["schedule"] == 60.0
