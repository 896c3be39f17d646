from __future__ import annotations

from django.db import models

from apps.core.models import UUIDModel


class Quota(UUIDModel):
    """A tenant's limit for one resource (``gpus``, ``nodes``, ``storage_gb``, ...)."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="quotas")
    resource = models.CharField(max_length=64)
    limit = models.BigIntegerField()

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["resource"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "resource"], name="quota_unique_resource"),
            models.CheckConstraint(condition=models.Q(limit__gte=0), name="quota_limit_not_negative"),
        ]

    def __str__(self):
        return f"{self.tenant_id} {self.resource}={self.limit}"
