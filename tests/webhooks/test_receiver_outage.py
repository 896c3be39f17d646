"""CCP's webhook receiver down for an hour (simulated with time-machine; beat's sweep
runs whenever a retry falls due): each state change is tried on seed 001 section 8.2's
schedule (five retries after the first try, backing off from 2 s to 60 s with
jitter), then kept as a dead letter; nothing else waits for it. Once the receiver is
back, the operator replays the dead letters from the admin and CCP gets each event
exactly once."""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import timedelta

import pytest
import time_machine
from django.db.models import Min
from django.test import Client
from django.utils import timezone

from apps.allocations import services
from apps.allocations.models import Allocation
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from apps.webhooks.tasks import sweep_due_deliveries
from tests.support.processes import free_port
from tests.support.receiver import WEBHOOK_SECRET, WebhookReceiver

pytestmark = pytest.mark.django_db

OUTAGE = timedelta(hours=1)


@pytest.fixture
def receiver_address(settings):
    """Where CCP's receiver listens, nothing there yet: connections are refused."""
    port = free_port()
    settings.CCP_WEBHOOK_URL = f"http://127.0.0.1:{port}/"
    settings.CCP_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.WEBHOOK_JITTER = True  # the shipped schedule, jitter and all
    return port


def test_receiver_down_for_an_hour_dead_letters_then_replay_delivers_each_event_once(
    receiver_address, allocator, project, nodes, platform_admin, django_capture_on_commit_callbacks
):
    allocator = principals.for_user(allocator)
    with django_capture_on_commit_callbacks(execute=True):
        made = services.allocate(allocator, project, flavor_name="h100-8x", os_image="ubuntu-22.04", count=2)
    with django_capture_on_commit_callbacks(execute=True):
        services.release(allocator, made[0])
    # ACTIVE twice and RELEASED once, each tried once already (refused).
    assert Delivery.objects.count() == 3
    start = timezone.now()
    tries: dict = defaultdict(list)  # delivery -> the (simulated) times it was tried
    for delivery in Delivery.objects.all():
        tries[delivery.pk].append(delivery.updated_at)  # its first try's end, whence the backoff
    with time_machine.travel(start, tick=False) as clock:
        # Beat's sweep, run whenever a retry falls due within the hour (and at its end).
        while timezone.now() < start + OUTAGE:
            due = Delivery.objects.filter(status=Delivery.Status.PENDING).aggregate(Min("next_attempt_at"))
            clock.move_to(min(due["next_attempt_at__min"] or start + OUTAGE, start + OUTAGE))
            before = dict(Delivery.objects.values_list("pk", "attempts"))
            sweep_due_deliveries()
            for pk, attempts in Delivery.objects.values_list("pk", "attempts"):
                if attempts > before[pk]:
                    tries[pk].append(timezone.now())

    # The work never waited for CCP.
    states = sorted(Allocation.objects.values_list("state", flat=True))
    assert states == [Allocation.State.ACTIVE, Allocation.State.RELEASED]
    retries, first, ceiling = webhooks.POLICY[webhooks.STATE_CHANGE]
    for delivery in Delivery.objects.all():
        assert delivery.status == Delivery.Status.DEAD, delivery.last_error
        assert delivery.attempts == retries + 1
        assert "ConnectError" in delivery.last_error
        gaps = [
            (later - earlier).total_seconds() for earlier, later in itertools.pairwise(tries[delivery.pk])
        ]
        assert len(gaps) == retries
        for retry, gap in enumerate(gaps):
            backoff = min(ceiling, first * 2**retry)
            assert backoff / 2 <= gap <= backoff, (retry, gaps)  # jittered down to half at most
    assert AuditEvent.objects.filter(action="webhook.dead_letter").count() == 3

    receiver = WebhookReceiver(secret=WEBHOOK_SECRET, port=receiver_address)
    try:
        operator = Client()
        operator.force_login(platform_admin)
        dead = [str(pk) for pk in Delivery.objects.values_list("pk", flat=True)]
        with django_capture_on_commit_callbacks(execute=True):
            response = operator.post(
                "/admin/webhooks/delivery/", {"action": "replay", "_selected_action": dead}, follow=True
            )
        assert response.status_code == 200
        assert set(Delivery.objects.values_list("status", flat=True)) == {Delivery.Status.DELIVERED}
        # Replaying again finds no dead letter, and the sweep nothing due: nothing is sent twice.
        with django_capture_on_commit_callbacks(execute=True):
            operator.post("/admin/webhooks/delivery/", {"action": "replay", "_selected_action": dead})
        with time_machine.travel(timezone.now() + OUTAGE, tick=False):
            assert sweep_due_deliveries() == 0

        received = [request["headers"]["X-GPUaaS-Event-Id"] for request in receiver.requests]
        assert sorted(received) == sorted(
            str(event) for event in Delivery.objects.values_list("event_id", flat=True)
        )
        assert all(request["verified"] for request in receiver.requests)
    finally:
        receiver.close()
    assert AuditEvent.objects.filter(action="webhook.replay", actor=platform_admin.username).count() == 3
