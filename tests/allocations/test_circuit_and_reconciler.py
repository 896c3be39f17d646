"""The provisioning circuit breaker, and the reconciler that finds stuck allocations."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.allocations import pipeline, services
from apps.allocations.models import Allocation
from apps.core import simulation

pytestmark = pytest.mark.django_db


def test_open_circuit_holds_steps_without_calling_the_backends(pending_allocation):
    allocation = pending_allocation
    for _ in range(5):  # five failures inside the 30 s window open it
        pipeline.BREAKER.record_failure()
    wait = pipeline.advance(allocation.pk)
    assert 1 <= wait <= 30
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.PROVISIONING
    assert allocation.step == "network"
    assert simulation.get("ndfc", "port", allocation.node.hostname) is None  # the fabric was not touched
    assert allocation.steps.get(phase="provision", name="network").attempts == 1  # waiting costs no retry

    pipeline.BREAKER.record_success()
    assert pipeline.advance(allocation.pk) is None
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE


def test_reconciler_resumes_an_allocation_whose_wake_up_was_lost(pending_allocation):
    allocation = pending_allocation
    assert services.reconcile_stuck() == 0  # too recent to be called stuck
    later = timezone.now() + timedelta(minutes=5)
    assert services.reconcile_stuck(now=later) == 1  # eager: resumed right here
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    assert services.reconcile_stuck(now=later) == 0


def test_reconciler_takes_over_an_expired_lease(pending_allocation):
    allocation = pending_allocation
    Allocation.objects.filter(pk=allocation.pk).update(lease_until=timezone.now() + timedelta(seconds=60))
    assert pipeline.advance(allocation.pk) is None  # another worker holds it: hands off
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.PENDING
    Allocation.objects.filter(pk=allocation.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert services.reconcile_stuck() == 1
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
