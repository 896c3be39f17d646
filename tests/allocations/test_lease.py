"""The pipeline's short lease: kept while a step works for longer than it, and
fenced, so a worker that lost it cannot clear the lease of the worker that took over."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.allocations import pipeline
from apps.allocations.lease import Lease
from apps.allocations.models import Allocation

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_step_working_longer_than_the_lease_keeps_it(
    real_broker, real_drivers, fake_ndfc, settings, pending_allocation
):
    allocation = pending_allocation
    fake_ndfc.attach_seconds = 1.5  # NDFC answers an attachment slowly: longer than the lease
    settings.PIPELINE_LEASE_SECONDS = 0.6  # renewed every 0.2 s while the attachment takes 1.5 s

    def worker():
        try:
            pipeline.advance(allocation.pk)
        finally:
            connection.close()

    first = threading.Thread(target=worker)
    first.start()
    deadline = time.monotonic() + 10
    while fake_ndfc.attachment_requests == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)  # past the lease's length, while NDFC is still answering
    assert pipeline.advance(allocation.pk) is None  # a second worker finds it held
    first.join(timeout=20)

    network = Allocation.objects.get(pk=allocation.pk).steps.get(phase="provision", name="network")
    assert network.status == "succeeded"
    assert network.attempts == 1
    assert fake_ndfc.attachment_requests == 1  # the fabric was asked once


def test_a_worker_that_lost_its_lease_cannot_clear_the_next_holders(pending_allocation):
    allocation = pending_allocation
    stalled = Lease.take(allocation.pk)
    assert stalled is not None
    assert Lease.take(allocation.pk) is None

    # The first holder stalls past its lease; another worker takes over.
    Allocation.objects.filter(pk=allocation.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    current = Lease.take(allocation.pk)
    assert current is not None

    stalled.give_back(next_check_in=None)  # what the stalled worker does when it wakes
    held = Allocation.objects.get(pk=allocation.pk).lease_until
    assert held is not None
    assert held > timezone.now()  # still the new holder's
    assert not stalled._renew()
    assert stalled.lost
    current.give_back(next_check_in=None)
    assert Allocation.objects.get(pk=allocation.pk).lease_until is None
