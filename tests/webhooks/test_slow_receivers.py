"""A tenant's receiver that never finishes answering holds a delivery worker for one
timeout, not for as long as it keeps dripping: the whole answer has a deadline, and
its body is never read (only the status decides). Before, a per-read timeout let
one byte every few seconds hold the worker for hours, and the sweeper handed the
delivery, due again, to the next worker every 2 timeouts, until none was left."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from django.db import connections

from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from tests.support.receiver import DrippingReceiver

# A worker thread sends it: it must see the delivery committed.
pytestmark = pytest.mark.django_db(transaction=True)
# Generous against the 1 s timeout below: what matters is that the attempt ends at all.
ENDS_WITHIN = 60.0


@pytest.fixture
def dripping(settings):
    settings.WEBHOOK_TIMEOUT_SECONDS = 1.0
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # stands in for a public address
    made = []

    def make(drip: str) -> DrippingReceiver:
        made.append(DrippingReceiver(drip))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def _attempt(delivery_id) -> None:
    try:
        webhooks.attempt(delivery_id)
    finally:
        connections.close_all()  # this thread's


@pytest.mark.parametrize("drip", ["headers", "body"])
def test_a_receiver_that_never_finishes_answering_costs_one_timeout(dripping, drip):
    receiver = dripping(drip)
    delivery = Delivery.objects.create(
        event_type=webhooks.ALERT,
        url=receiver.url + "/alerts",
        body=json.dumps({"event_id": str(uuid.uuid4())}),
        correlation_id="c-1",
        public_only=True,
    )
    worker = threading.Thread(target=_attempt, args=(delivery.pk,), daemon=True)
    worker.start()
    worker.join(ENDS_WITHIN)
    assert not worker.is_alive(), "the attempt is still reading the receiver's answer"
    delivery.refresh_from_db()
    assert receiver.requests == 1
    if drip == "headers":
        # No status came: it failed, and is retried later like any timeout.
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
        assert "Timeout" in delivery.last_error
    else:
        # The status decides; the body the receiver is still sending is not waited for.
        assert (delivery.status, delivery.last_status_code) == ("delivered", 200)
