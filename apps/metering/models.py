from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.core.models import UUIDModel


class Rate(UUIDModel):
    """The price of one unit of a metered resource from ``effective_from`` on, in the
    platform's billing currency (``GPUAAS_BILLING_CURRENCY``), until a later rate of the
    same resource (and flavor) starts. Rates are never edited: a new price is a new row,
    so the past keeps the price it had (decision 0051).

    Node-hours are priced per flavor: a ``node_hours`` rate names its flavor, and before
    a flavor's first one its ``catalog.Flavor.rate_per_node_hour`` applies. Any other
    resource without a rate in effect is listed in the billing export at 0."""

    class Resource(models.TextChoices):
        NODE_HOURS = "node_hours", "Node-hours"
        GPU_HOURS = "gpu_hours", "GPU-hours"
        CPU_HOURS = "cpu_hours", "CPU-hours"
        CLUSTER_HOURS = "cluster_hours", "Cluster-hours"
        STORAGE_GB_HOURS = "storage_gb_hours", "Storage GB-hours"

    resource = models.CharField(max_length=32, choices=Resource.choices)
    flavor = models.ForeignKey(
        "catalog.Flavor",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Node-hours only: the flavor priced",
    )
    rate = models.DecimalField(max_digits=12, decimal_places=6)
    effective_from = models.DateTimeField(
        default=timezone.now, help_text="Applies to usage from this moment on"
    )
    created_by = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["resource", "flavor__name", "effective_from"]
        constraints = [
            models.CheckConstraint(condition=models.Q(rate__gte=0), name="rate_not_negative"),
            models.CheckConstraint(
                condition=models.Q(resource="node_hours", flavor__isnull=False)
                | (~models.Q(resource="node_hours") & models.Q(flavor__isnull=True)),
                name="rate_flavor_only_for_node_hours",
            ),
            models.UniqueConstraint(
                fields=["resource", "effective_from"],
                condition=models.Q(flavor__isnull=True),
                name="rate_unique_start",
            ),
            models.UniqueConstraint(
                fields=["flavor", "effective_from"],
                condition=models.Q(flavor__isnull=False),
                name="rate_unique_flavor_start",
            ),
        ]

    def __str__(self):
        priced = f"{self.resource} ({self.flavor})" if self.flavor_id else self.resource
        return f"{priced} at {self.rate} from {self.effective_from:%Y-%m-%d %H:%M}"


class BillingExport(UUIDModel):
    """A month's billing CSV as it was first exported once the month was over: every
    later export of that month answers these bytes, whatever changes afterwards."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    period = models.DateField(help_text="The month's first day (UTC)")
    body = models.TextField()
    sha256 = models.CharField(max_length=64)
    exported_by = models.CharField(max_length=255)

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["-period"]
        constraints = [models.UniqueConstraint(fields=["tenant", "period"], name="billing_export_once")]

    def __str__(self):
        return f"{self.tenant_id} {self.period:%Y-%m}"


class BillingAdjustment(UUIDModel):
    """A correction of an exported month: a signed amount with its reason, listed in
    the tenant's next recorded export (``export``), never folded into the month."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(
        "tenancy.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    period = models.DateField(help_text="The corrected month's first day (UTC)")
    amount = models.DecimalField(max_digits=14, decimal_places=2, help_text="Negative: a credit")
    reason = models.TextField(max_length=1000)
    created_by = models.CharField(max_length=255)
    export = models.ForeignKey(
        BillingExport, on_delete=models.PROTECT, null=True, blank=True, related_name="adjustments"
    )

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"{self.tenant_id} {self.period:%Y-%m} {self.amount}"


class QuotaLevel(UUIDModel):
    """Which warning level (``none``, ``80``, ``90``) a tenant's resource was last seen
    at: a crossing is raised once when the level rises, and re-armed when it falls."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(max_length=64)
    level = models.CharField(max_length=4, default="none")

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "resource"], name="quota_level_unique")]


class QuotaCrossing(UUIDModel):
    """A tenant's use of a resource rose past 80 % or 90 % of its limit (seed 001
    section 4.6.3); ``cleared_at`` when it fell back below that level."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(max_length=64)
    level = models.CharField(max_length=4)
    percent = models.FloatField()
    used = models.BigIntegerField()
    limit = models.BigIntegerField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.tenant_id} {self.resource} past {self.level} %"
