from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from django.db import models

from apps.core.models import UUIDModel


class Delivery(UUIDModel):
    """One outbound event to one receiver: written in the same transaction as the
    change it reports (outbox), then delivered at least once with retries;
    after the last retry it is a dead letter an operator can replay."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        DEAD = "dead"

    event_id = models.UUIDField(default=uuid.uuid4, editable=False, db_index=True)
    event_type = models.CharField(max_length=64)
    url = models.URLField("URL", max_length=500)
    body = models.TextField(help_text="the exact bytes signed and sent on every attempt")
    correlation_id = models.CharField(max_length=128)
    signer = models.CharField(
        max_length=64,
        blank=True,
        help_text="whose secret signs it (a subscription's id); empty: the CCP webhook secret",
    )
    public_only = models.BooleanField(
        default=False,
        help_text="a tenant's receiver: sent only to public addresses, checked on every attempt",
    )
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=6)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"

    def __str__(self):
        return f"{self.event_type} to {urlsplit(self.url).hostname} · {self.status}"
