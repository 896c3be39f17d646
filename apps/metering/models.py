from __future__ import annotations

from django.db import models

from apps.core.models import UUIDModel


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
