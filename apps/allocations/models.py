from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from apps.core.models import UUIDModel


class Node(UUIDModel):
    """A bare-metal GPU server in the fleet."""

    class State(models.TextChoices):
        ENROLLING = "enrolling"
        AVAILABLE = "available"
        PROVISIONING = "provisioning"
        ALLOCATED = "allocated"
        RELEASING = "releasing"
        MAINTENANCE = "maintenance"
        FAILED = "failed"
        OFFLINE = "offline"

    hostname = models.CharField(max_length=253, unique=True)
    flavor = models.ForeignKey("catalog.Flavor", on_delete=models.PROTECT, related_name="nodes")
    rack = models.CharField(max_length=64, blank=True)
    bmc_address = models.GenericIPAddressField("BMC address", null=True, blank=True)
    maas_system_id = models.CharField("MAAS system id", max_length=32, blank=True)
    ib_guid = models.CharField("InfiniBand port GUID", max_length=32, blank=True)
    switch_serial = models.CharField("leaf switch serial number", max_length=64, blank=True)
    switch_port = models.CharField("leaf switch interface", max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ENROLLING, db_index=True)
    state_reason = models.TextField(blank=True)
    approved = models.BooleanField(default=False, help_text="schedulable once an operator approved the host")
    # Node agent enrollment (see apps.runtime): a one-time bootstrap token, then a node credential.
    bootstrap_token_hash = models.CharField(max_length=64, blank=True)
    bootstrap_token_expires_at = models.DateTimeField(null=True, blank=True)
    bootstrap_token_hours = models.PositiveSmallIntegerField(
        "bootstrap token lifetime (hours)",
        default=24,
        validators=[MinValueValidator(1), MaxValueValidator(24 * 30)],
        help_text="how long a bootstrap token issued for this node may be used to enroll",
    )
    credential_hash = models.CharField(max_length=64, blank=True)
    enrolled_at = models.DateTimeField(null=True, blank=True)
    # The platform proxy connects to the node's apps here and nowhere else: the address
    # its agent enrolled from, as this platform saw it (the node's root user controls
    # what the agent reports, not where its enrollment came from).
    agent_address = models.GenericIPAddressField(
        null=True, blank=True, help_text="the only address the agent may report its apps at"
    )
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_offline = models.BooleanField(default=False, help_text="the enrolled agent stopped heartbeating")

    # Nodes are platform inventory: tenants see them only through their allocations.
    tenant_path = None
    project_path = None

    class Meta:
        ordering = ["hostname"]
        indexes = [models.Index(fields=["flavor", "state", "approved"], name="node_schedulable")]

    def __str__(self):
        return self.hostname


class Allocation(UUIDModel):
    """One node given to one project, from request to release."""

    class State(models.TextChoices):
        PENDING = "PENDING"
        PROVISIONING = "PROVISIONING"
        ACTIVE = "ACTIVE"
        FAILED = "FAILED"
        RELEASING = "RELEASING"
        RELEASED = "RELEASED"

    LIVE_STATES = (State.PENDING, State.PROVISIONING, State.ACTIVE, State.RELEASING)
    IN_FLIGHT_STATES = (State.PENDING, State.PROVISIONING, State.RELEASING)

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="allocations")
    project = models.ForeignKey("tenancy.Project", on_delete=models.PROTECT, related_name="allocations")
    flavor = models.ForeignKey("catalog.Flavor", on_delete=models.PROTECT, related_name="+")
    gpus = models.PositiveSmallIntegerField("GPUs", help_text="GPUs this allocation counts against quota")
    os_image = models.CharField("OS image", max_length=128)
    network_id = models.CharField(max_length=128, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    step = models.CharField(max_length=32, blank=True)
    progress = models.PositiveSmallIntegerField(default=0)
    failure_reason = models.TextField(blank=True)
    requested_by = models.CharField(max_length=255)
    # Who asked for the release: the drain tells each deleted instance why it went.
    released_by = models.CharField(max_length=255, blank=True)
    drain = models.BooleanField(default=True, help_text="stop workloads through the agent before release")
    erase_disk = models.BooleanField(default=False)
    abort_requested = models.BooleanField(default=False)
    # After a failure: the release steps are still giving back what provisioning took.
    compensating = models.BooleanField(default=False)
    hardware_fault = models.BooleanField(default=False)
    # The pipeline's own bookkeeping: who runs it now, and when it must next be looked at.
    lease_until = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # A node is never in two live allocations.
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(state__in=["PENDING", "PROVISIONING", "ACTIVE", "RELEASING"]),
                name="allocation_one_live_per_node",
            ),
        ]
        indexes = [
            models.Index(fields=["node", "-created_at"], name="allocation_node_recent"),
            models.Index(fields=["project", "-created_at"], name="allocation_project_recent"),
            models.Index(fields=["tenant", "state"], name="allocation_tenant_state"),
            models.Index(fields=["state", "next_check_at"], name="allocation_due"),
            # The platform-wide list (the operations pages), newest first, a page at a time.
            models.Index(fields=["-created_at", "-id"], name="allocation_recent"),
        ]

    def __str__(self):
        # As operators say it: "gpu1-001.demo · Demo project · RELEASED".
        return f"{self.node.hostname} · {self.project.name} · {self.state}"

    @property
    def is_live(self) -> bool:
        return self.state in self.LIVE_STATES


class AllocationStep(models.Model):
    """One pipeline step of an allocation: provisioning or its undoing at release."""

    # What tenant pages call each step (the names are the pipeline's and the admin's).
    LABELS = {
        "network": "Setting up the network",
        "os_deploy": "Installing the operating system",
        "storage": "Attaching storage",
        "agent": "Starting the node agent",
        "drain": "Stopping workloads",
        "access_revoke": "Revoking logins",
        "storage_detach": "Detaching storage",
        "os_release": "Wiping the operating system",
        "network_detach": "Removing the network",
    }

    class Phase(models.TextChoices):
        PROVISION = "provision"
        RELEASE = "release"

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        COMPENSATED = "compensated"

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="steps")
    phase = models.CharField(max_length=10, choices=Phase.choices)
    name = models.CharField(max_length=32)
    position = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    output = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["phase", "position"]
        constraints = [
            models.UniqueConstraint(fields=["allocation", "phase", "name"], name="allocation_step_unique"),
        ]

    def __str__(self):
        return f"{self.phase} step {self.name} · {self.status}"

    @classmethod
    def label_for(cls, name: str) -> str:
        return cls.LABELS.get(name, name.replace("_", " ").capitalize()) if name else ""
