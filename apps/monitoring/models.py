"""Monitoring: GPU telemetry (the embedded store's samples, the agents' scrape
targets, XID events) and alerts (rules, alerts, subscriptions, measurements)."""

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
    gpu = models.PositiveSmallIntegerField("GPU")
    uuid = models.CharField("GPU UUID", max_length=64)
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
        verbose_name = "GPU sample"
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
    gpu = models.PositiveSmallIntegerField("GPU")
    uuid = models.CharField("GPU UUID", max_length=64, blank=True)
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
        verbose_name = "XID event"
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "gpu", "code"],
                condition=Q(resolved_at__isnull=True),
                name="xid_event_open_once",
            ),
        ]

    def __str__(self):
        return f"XID {self.code} on {self.node.hostname} GPU {self.gpu}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


# --- Alerts (seed 001 section 4.7.2; apps.monitoring.alerts) ---------------------------------------


class AlertRule(models.Model):
    """One metric at one severity: it fires when the metric's value stays above
    ``threshold`` for ``for_seconds``. Shipped by a data migration with the seed's
    values; operators change threshold, duration and whether it is on."""

    class Severity(models.TextChoices):
        WARNING = "warning"
        CRITICAL = "critical"

    name = models.CharField(max_length=64, primary_key=True, help_text="{metric}_{severity}")
    metric = models.CharField(max_length=32)
    severity = models.CharField(max_length=10, choices=Severity.choices)
    threshold = models.FloatField(help_text="fires above this value")
    for_seconds = models.PositiveIntegerField(
        "for (seconds)", default=0, help_text="how long the value must stay above the threshold"
    )
    enabled = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["metric", "severity"]
        constraints = [
            models.UniqueConstraint(fields=["metric", "severity"], name="alert_rule_one_per_severity")
        ]

    def __str__(self):
        return self.name


class Alert(UUIDModel):
    """One rule's condition on one subject (a GPU, a node, a tenant's quota, a
    cluster): ``pending`` while it waits out the rule's ``for``, ``firing`` once
    sent, ``resolved`` once its condition stayed clear (sent again). A pending alert
    whose condition clears is deleted: it never was an alert to anyone."""

    class State(models.TextChoices):
        PENDING = "pending"
        FIRING = "firing"
        RESOLVED = "resolved"

    OPEN = (State.PENDING, State.FIRING)

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=200, help_text="what the rule watches, e.g. node:<id>:gpu:3")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING, db_index=True)
    severity = models.CharField(max_length=10)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    project = models.ForeignKey(
        "tenancy.Project", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    allocation = models.ForeignKey(
        "allocations.Allocation", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    node = models.ForeignKey(
        "allocations.Node", null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    hostname = models.CharField(max_length=253, blank=True)
    gpu = models.PositiveSmallIntegerField("GPU", null=True, blank=True)
    value = models.FloatField()
    threshold = models.FloatField()
    summary = models.CharField(max_length=300)
    pending_since = models.DateTimeField()
    last_breach_at = models.DateTimeField(help_text="the last evaluation that found the condition holding")
    started_at = models.DateTimeField(null=True, blank=True, help_text="when it fired")
    resolved_at = models.DateTimeField(null=True, blank=True)
    inhibited = models.BooleanField(
        default=False, help_text="held back by a critical alert on the same subject or its node being down"
    )

    tenant_path = "tenant_id"
    project_path = "project_id"
    visible_to_project_members = False

    class Meta:
        ordering = ["-started_at", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state__in=["pending", "firing"]),
                name="alert_open_once",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "state", "started_at"], name="alert_tenant_state")]

    def __str__(self):
        where = self.hostname or self.subject
        if self.hostname and self.gpu is not None:
            where = f"{self.hostname} GPU {self.gpu}"
        return f"{self.rule_id} · {where} · {self.state}"


class AlertSubscription(UUIDModel):
    """A receiver of alerts: one tenant's (``tenant`` set) or every tenant's (CCP,
    ``tenant`` empty), of the listed severities, signed with its own secret (in the
    secrets store at ``secret_path``; read only through
    ``alerts.subscriptions.signing_secret``)."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="alert_subscriptions"
    )
    url = models.URLField("URL", max_length=500)
    secret_path = models.CharField(max_length=255, editable=False)
    severities = models.JSONField(default=list)
    created_by = models.CharField(max_length=255)

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["created_at"]

    def __str__(self):
        return f"{self.tenant_id or 'platform'} -> {self.url}"

    @staticmethod
    def path_for(pk) -> str:
        return f"monitoring/alert-subscriptions/{pk}"


class Measurement(models.Model):
    """The latest value another part of the platform reported for a metric the GPU
    telemetry does not carry (a tenant's quota use, a node's CPU, DDN latency), for
    the alert rules on it. One row per metric and subject, overwritten."""

    metric = models.CharField(max_length=32)
    subject = models.CharField(max_length=200)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    node = models.ForeignKey(
        "allocations.Node", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    label = models.CharField(max_length=100, blank=True, help_text="what was measured, for the summary")
    value = models.FloatField()
    at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["metric", "subject"], name="measurement_latest")]

    def __str__(self):
        return f"{self.metric} {self.subject}={self.value}"


class AlertEvaluator(models.Model):
    """The one row whose lease says which worker evaluates the rules now, so that two
    beats (or a slow round and the next one) never evaluate at the same time."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_round_at = models.DateTimeField(null=True, blank=True)
    last_round_seconds = models.FloatField(null=True, blank=True)

    def __str__(self):
        return "alert evaluator"
