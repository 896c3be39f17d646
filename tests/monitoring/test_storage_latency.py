"""DDN's latency in a tenant's directory past 10 ms is a ``storage_latency_warning``,
past 15 ms a ``storage_latency_critical`` (seed 001 section 4.7.2); CCP receives each
once when it fires and once when it resolves."""

from __future__ import annotations

import pytest

from apps.core import simulation
from apps.core.models import SimulatedFault
from apps.monitoring.models import Measurement
from apps.monitoring.services import measure_storage_latency
from apps.storage.models import TenantStorage
from tests.monitoring.alerting import Rounds, received, states

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]


def hold_latency(tenant, ms: float) -> None:
    """What a drill does to the simulated DDN: its directory answers this slowly."""
    path = TenantStorage.objects.get(tenant=tenant).path
    with simulation.locked("ddn", "directory", path) as directory:
        simulation.update(directory, latency_ms=ms)


def test_a_slow_directory_fires_the_latency_rules_once_and_resolves_them_once(
    ready_tenant, receiver, django_capture_on_commit_callbacks
):
    rounds = Rounds(django_capture_on_commit_callbacks)
    assert measure_storage_latency() == 1
    rounds.at(0)
    assert received(receiver) == []  # a healthy directory (2 ms) raises nothing

    hold_latency(ready_tenant, 12.5)
    measure_storage_latency()
    rounds.at(15)
    rounds.at(30)
    assert states(receiver, "storage_latency_warning") == ["firing"]
    [fired] = received(receiver, "storage_latency_warning")
    assert (fired["tenant_id"], fired["value"], fired["threshold"]) == ("acme", 12.5, 10.0)

    hold_latency(ready_tenant, 21.0)
    measure_storage_latency()
    rounds.at(45)
    assert states(receiver, "storage_latency_critical") == ["firing"]

    hold_latency(ready_tenant, 3.0)
    measure_storage_latency()
    for moment in range(60, 150, 15):  # healthy for a minute: resolved (flap damping)
        rounds.at(moment)
    assert states(receiver, "storage_latency_critical") == ["firing", "resolved"]
    assert states(receiver, "storage_latency_warning") == ["firing", "resolved"]


def test_a_directory_ddn_cannot_measure_keeps_its_last_value(ready_tenant):
    hold_latency(ready_tenant, 11.0)
    assert measure_storage_latency() == 1
    SimulatedFault.objects.create(system="ddn", operation="latency_ms")
    assert measure_storage_latency() == 0
    assert Measurement.objects.get(metric="storage_latency").value == 11.0
