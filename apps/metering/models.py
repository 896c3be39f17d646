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


class Rate(UUIDModel):
    """The price of one unit of a metered resource other than node-hours, which each
    flavor prices itself (``catalog.Flavor.rate_per_node_hour``); in the platform's
    billing currency (``GPUAAS_BILLING_CURRENCY``). A resource without a rate is
    listed in the billing export at 0."""

    class Resource(models.TextChoices):
        GPU_HOURS = "gpu_hours", "GPU-hours"
        CPU_HOURS = "cpu_hours", "CPU-hours"
        CLUSTER_HOURS = "cluster_hours", "Cluster-hours"
        STORAGE_GB_HOURS = "storage_gb_hours", "Storage GB-hours"

    resource = models.CharField(max_length=32, choices=Resource.choices, unique=True)
    rate = models.DecimalField(max_digits=12, decimal_places=6)

    class Meta:
        ordering = ["resource"]
        constraints = [models.CheckConstraint(condition=models.Q(rate__gte=0), name="rate_not_negative")]

    def __str__(self):
        return f"{self.resource} at {self.rate}"
