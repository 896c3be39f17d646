"""What other apps read of the outbound webhooks."""

from __future__ import annotations

from apps.webhooks.models import Delivery


def dead_letter_count() -> int:
    """Deliveries that ran out of retries and wait for an operator's replay."""
    return Delivery.objects.filter(status=Delivery.Status.DEAD).count()
