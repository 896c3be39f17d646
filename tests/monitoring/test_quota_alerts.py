"""A tenant's quota use reaching 80 % is a ``quota_warning`` alert that CCP receives
once, and falling back resolves it once: metering's own crossing check, through its
signal, into the alert rules (seed 001 sections 4.6.3 and 4.7.2)."""

from __future__ import annotations

import pytest

from apps.allocations.models import Allocation
from apps.metering.services import check_quota_thresholds
from apps.tenancy import quotas
from tests.factories import AllocationFactory
from tests.monitoring.alerting import Rounds, received, states

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]


def test_reaching_80_percent_of_a_quota_fires_once_and_resolves_once(
    tenant, project, flavor, receiver, django_capture_on_commit_callbacks
):
    rounds = Rounds(django_capture_on_commit_callbacks)
    quotas.set_quota(tenant, {"nodes": 10})
    held = [AllocationFactory(project=project, node__flavor=flavor) for _ in range(8)]
    with django_capture_on_commit_callbacks(execute=True):
        check_quota_thresholds(tenant)
    rounds.at(0)
    rounds.at(15)
    assert states(receiver, "quota_warning") == ["firing"]
    assert states(receiver, "quota_critical") == []
    [fired] = received(receiver, "quota_warning")
    assert (fired["tenant_id"], fired["value"], fired["threshold"]) == ("acme", 80.0, 80.0)
    assert "at or above 80 %" in fired["summary"]

    Allocation.objects.filter(pk__in=[a.pk for a in held[:4]]).update(state=Allocation.State.RELEASED)
    with django_capture_on_commit_callbacks(execute=True):
        check_quota_thresholds(tenant)
    for moment in (30, 90, 105):
        rounds.at(moment)
    assert states(receiver, "quota_warning") == ["firing", "resolved"]
