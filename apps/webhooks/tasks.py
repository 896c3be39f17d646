from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from apps.webhooks import services
from apps.webhooks.models import Delivery


@shared_task(bind=True, acks_late=True, name="apps.webhooks.tasks.deliver")
def deliver(self, delivery_id: str) -> None:
    delivery = services.attempt(delivery_id)
    if delivery is None or delivery.status != Delivery.Status.PENDING or delivery.next_attempt_at is None:
        return
    wait = max(0.0, (delivery.next_attempt_at - timezone.now()).total_seconds())
    if self.request.is_eager:
        return  # tests drive retries explicitly; the sweeper does in production too
    self.apply_async((delivery_id,), countdown=wait)


@shared_task(name="apps.webhooks.tasks.sweep_due_deliveries")
def sweep_due_deliveries() -> int:
    """Deliveries whose wake-up was lost (worker restart) are picked up here."""
    ids = services.due_ids()
    for delivery_id in ids:
        deliver.delay(str(delivery_id))
    return len(ids)


@shared_task(name="apps.webhooks.tasks.prune_deliveries")
def prune_deliveries() -> int:
    return services.prune()
