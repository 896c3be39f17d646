"""Monitoring: GPU telemetry (the embedded store's samples, the agents' scrape
targets, XID events); alert rules and subscriptions come later."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from apps.core.models import UUIDModel


class GpuSample(models.Model):
    """One GPU's readings over one bucket of the embedded metrics store.

    ``resolution`` is the bucket's length in seconds: 60 for what agents report
    (several readings of a minute averaged as they arrive), 300 and 3600 for the
    rollups. ``ts`` is the bucket's start in unix seconds, an integer so that
    bucketing to any step is integer arithmetic on SQLite and PostgreSQL alike.
    Nodes, not tenants: samples are attributed at query time by the allocation
    records (``apps.monitoring.series``), never by what an agent says.
    """

    id = models.BigAutoField(primary_key=True)
    node = models.ForeignKey("allocations.Node", on_delete=models.CASCADE, related_name="+")
    gpu = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64)
    resolution = models.PositiveIntegerField()
    ts = models.BigIntegerField()
    count = models.PositiveIntegerField(default=1, help_text="readings averaged into this bucket")
    last_ts = models.FloatField(help_text="the newest reading's time: a retried report is not counted twice")
    utilization = models.FloatField()
    memory_used = models.FloatField()
    memory_free = models.FloatField()
    temperature = models.FloatField()
    power = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "resolution", "ts", "gpu"], name="gpu_sample_bucket"),
        ]
        indexes = [models.Index(fields=["resolution", "ts"], name="gpu_sample_age")]

    def __str__(self):
        return f"{self.node_id}/{self.gpu}@{self.ts}/{self.resolution}s"


class NodeExporter(models.Model):
    """Where a node's agent serves its DCGM-form metrics, for the scrape targets
    file: the agent's enrollment address (never an address the agent names) and
    the port it reports."""

    node = models.OneToOneField(
        "allocations.Node", on_delete=models.CASCADE, primary_key=True, related_name="exporter"
    )
    port = models.PositiveIntegerField()
    reported_at = models.DateTimeField()

    def __str__(self):
        return f"{self.node_id}:{self.port}"


class XidEvent(UUIDModel):
    """An XID error a GPU reported: one open event per node, GPU and code, however
    often the driver repeats it, until an operator resolves it."""

    class Severity(models.TextChoices):
        INFO = "info"
        WARNING = "warning"
        CRITICAL = "critical"

    node = models.ForeignKey("allocations.Node", on_delete=models.CASCADE, related_name="xid_events")
    gpu = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    code = models.PositiveIntegerField()
    severity = models.CharField(max_length=10, choices=Severity.choices)
    description = models.CharField(max_length=200)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    occurrences = models.PositiveIntegerField(default=1)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=255, blank=True)
    resolution_note = models.TextField(blank=True)

    # Fleet health: operators only (a tenant learns of its GPUs' faults through alerts).
    tenant_path = None
    project_path = None

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "gpu", "code"],
                condition=Q(resolved_at__isnull=True),
                name="xid_event_open_once",
            ),
        ]

    def __str__(self):
        return f"XID {self.code} on {self.node_id} GPU {self.gpu}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None
