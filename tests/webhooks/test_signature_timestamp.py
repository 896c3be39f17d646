"""Webhook signatures carry a timestamp (``X-GPUaaS-Timestamp``) signed with the
body, so a receiver can refuse a captured request replayed later."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from tests.support.receiver import TOLERANCE_SECONDS, WEBHOOK_SECRET, signature_valid

pytestmark = pytest.mark.django_db
SECRET = WEBHOOK_SECRET


def deliver(receiver) -> dict:
    body = json.dumps({"event_id": str(uuid.uuid4()), "state": "ACTIVE"}, separators=(",", ":"))
    delivery = Delivery.objects.create(
        event_type=webhooks.STATE_CHANGE,
        url=receiver.url + webhooks.STATE_CHANGE_PATH,
        body=body,
        correlation_id="c-1",
        max_attempts=1,
    )
    webhooks.attempt(delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED, delivery.last_error
    return receiver.requests[-1]


def test_a_delivery_carries_a_signed_timestamp(receiver):
    before = int(time.time())
    request = deliver(receiver)
    timestamp = int(request["headers"]["X-GPUaaS-Timestamp"])
    assert before <= timestamp <= time.time()
    assert request["headers"]["X-GPUaaS-Signature"].startswith("sha256=")
    assert request["verified"]


def test_a_captured_delivery_replayed_later_is_refused(receiver):
    request = deliver(receiver)
    headers, body = request["headers"], request["body"]
    sent = int(headers["X-GPUaaS-Timestamp"])
    assert signature_valid(SECRET, headers, body, now=sent + TOLERANCE_SECONDS - 1)
    assert not signature_valid(SECRET, headers, body, now=sent + TOLERANCE_SECONDS + 1)
    # Nor can the replayer freshen the timestamp: it is under the signature.
    freshened = {**headers, "X-GPUaaS-Timestamp": str(sent + TOLERANCE_SECONDS + 1)}
    assert not signature_valid(SECRET, freshened, body, now=sent + TOLERANCE_SECONDS + 1)
    assert not signature_valid(SECRET, headers, body + b" ", now=sent)
