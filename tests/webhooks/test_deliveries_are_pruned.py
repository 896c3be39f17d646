"""Deliveries done with are deleted by the hourly beat task: delivered ones after 7 days,
a tenant's receiver's dead letters after 30; what is still to send, and the operator's
(CCP's) dead letters, which an operator replays, stay."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from apps.webhooks.tasks import prune_deliveries
from celery_worker.schedule import beat_schedule

pytestmark = pytest.mark.django_db

Status = Delivery.Status


def delivery(name: str, status: str, *, days_ago: float, public_only: bool = False) -> Delivery:
    """A delivery whose last change (and delivery, when delivered) was ``days_ago``."""
    made = Delivery.objects.create(
        event_type=webhooks.ALERT,
        url=f"https://{name}.example/alerts",
        body="{}",
        correlation_id="c-1",
        event_id=uuid.uuid4(),
        status=status,
        public_only=public_only,
    )
    when = timezone.now() - timedelta(days=days_ago)
    Delivery.objects.filter(pk=made.pk).update(
        updated_at=when, delivered_at=when if status == Status.DELIVERED else None
    )
    return made


def test_deliveries_done_with_are_deleted_and_the_rest_kept():
    delivery("old-delivered", Status.DELIVERED, days_ago=8)
    delivery("old-tenant-dead", Status.DEAD, days_ago=31, public_only=True)
    kept = {
        delivery("recent-delivered", Status.DELIVERED, days_ago=6).pk,
        delivery("recent-tenant-dead", Status.DEAD, days_ago=29, public_only=True).pk,
        delivery("old-operator-dead", Status.DEAD, days_ago=90).pk,
        delivery("old-pending", Status.PENDING, days_ago=90).pk,
    }

    assert prune_deliveries() == 2
    assert set(Delivery.objects.values_list("pk", flat=True)) == kept


def test_beat_prunes_deliveries_hourly():
    [entry] = [e for e in beat_schedule().values() if e["task"] == prune_deliveries.name]
    assert entry["schedule"] == 3600.0
