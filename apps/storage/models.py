from __future__ import annotations

from django.db import models

from apps.core.models import UUIDModel


class TenantStorage(UUIDModel):
    """A tenant's Lustre directory on DDN, its NodeMap, its InfiniBand PKey and quota."""

    class Status(models.TextChoices):
        PROVISIONING = "provisioning"
        READY = "ready"
        FAILED = "failed"

    tenant = models.OneToOneField("tenancy.Tenant", on_delete=models.CASCADE, related_name="storage")
    tier = models.CharField(max_length=32, default="standard")
    path = models.CharField(max_length=255)
    nodemap = models.CharField(max_length=64)
    pkey = models.CharField("PKey", max_length=8, unique=True, help_text="InfiniBand partition key, hex")
    quota_gb = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROVISIONING)
    status_reason = models.TextField(blank=True)

    tenant_path = "tenant_id"
    project_path = None
    visible_to_project_members = True

    class Meta:
        verbose_name_plural = "tenant storage"

    def __str__(self):
        return self.path

    @property
    def project_id(self) -> int:
        """The Lustre project id the directory's quota is kept under: the PKey's number,
        already unique per tenant storage and never reused (decision 0067)."""
        return int(self.pkey, 16)


class StorageResize(UUIDModel):
    """A change of a tenant directory's quota, kept so that storage is billed at the
    size it had at each moment (``apps.metering.usage``)."""

    storage = models.ForeignKey(TenantStorage, on_delete=models.CASCADE, related_name="resizes")
    from_gb = models.PositiveIntegerField()
    to_gb = models.PositiveIntegerField()
    resized_at = models.DateTimeField(db_index=True)
    resized_by = models.CharField(max_length=255)

    tenant_path = "storage__tenant_id"
    project_path = None

    class Meta:
        ordering = ["resized_at"]

    def __str__(self):
        return f"{self.storage} {self.from_gb} -> {self.to_gb} GB"
