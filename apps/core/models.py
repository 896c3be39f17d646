from __future__ import annotations

import uuid

from django.db import models


class UUIDModel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class AppendOnlyError(Exception):
    pass


class AuditEvent(models.Model):
    """One privileged action or denied access. Never updated, never deleted.

    ``tenant``/``project`` are kept as plain UUIDs (not foreign keys) so the
    trail outlives the objects it talks about.
    """

    class Outcome(models.TextChoices):
        SUCCESS = "success"
        DENIED = "denied"
        FAILURE = "failure"

    id = models.BigAutoField(primary_key=True)
    occurred_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=255)
    actor_type = models.CharField(max_length=32)
    action = models.CharField(max_length=100, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=255, blank=True)
    tenant_id = models.UUIDField(null=True, blank=True)
    project_id = models.UUIDField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    correlation_id = models.CharField(max_length=128, db_index=True)
    source_ip = models.GenericIPAddressField("source IP", null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        ordering = ["-occurred_at", "-id"]
        indexes = [
            models.Index(fields=["tenant_id", "-occurred_at"]),
            # The operations page's filter lists the actor types there are (a DISTINCT).
            models.Index(fields=["actor_type"], name="audit_actor_type"),
        ]

    def __str__(self):
        return f"{self.occurred_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.outcome}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("audit events are append-only")


class IdempotencyRecord(models.Model):
    """The first response to an ``Idempotency-Key`` from one principal.

    The unique constraint is the lock: a concurrent duplicate's INSERT waits on
    the first transaction and then sees its stored response.
    """

    principal = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField(null=True)
    response_headers = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["principal", "key"], name="idempotency_unique_key")]


class SimulatedResource(models.Model):
    """State of a simulated external system (a MAAS machine, a fabric port, a PKey...).

    Simulated drivers keep what the real system would remember here, so a
    restart, a second worker or a test sees the same hardware.
    """

    system = models.CharField(max_length=16)  # maas, ndfc, ufm, ddn
    kind = models.CharField(max_length=32)
    key = models.CharField(max_length=255)
    state = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["system", "kind", "key"], name="simulated_resource_unique")
        ]

    def __str__(self):
        return f"{self.system}/{self.kind}/{self.key}"


class SimulatedFault(models.Model):
    """A fault the simulated drivers inject: operators and tests add rows.

    ``remaining`` failures then success (``None``: every time); ``probability``
    below 1 fails at random; ``mode`` ``hang`` makes the operation never finish.
    ``hardware`` marks the failure as the node's fault (node goes to ``failed``).
    """

    class Mode(models.TextChoices):
        FAIL = "fail"
        HANG = "hang"

    system = models.CharField(max_length=16)
    operation = models.CharField(max_length=64)
    target = models.CharField(max_length=255, blank=True, help_text="hostname or key; blank matches any")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.FAIL)
    remaining = models.PositiveIntegerField(null=True, blank=True)
    probability = models.FloatField(default=1.0)
    hardware = models.BooleanField(default=False)
    message = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.mode} {self.system}.{self.operation} {self.target or '*'}"


class StoredSecret(models.Model):
    """A secret of the ``local`` secrets store (apps/core/secrets): Fernet ciphertext
    under ``GPUAAS_ENCRYPTION_KEYS``. Other records name a secret by ``path``; only
    the store reads this table."""

    path = models.CharField(max_length=255, unique=True)
    ciphertext = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["path"]

    def __str__(self):
        return self.path
