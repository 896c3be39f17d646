from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.core.models import UUIDModel


class AppInstance(UUIDModel):
    """A catalog app launched on an allocation of a project."""

    class State(models.TextChoices):
        REQUESTED = "requested"
        STARTING = "starting"
        RUNNING = "running"
        STOPPING = "stopping"
        STOPPED = "stopped"
        DECOMMISSIONING = "decommissioning"
        DELETED = "deleted"
        FAILED = "failed"

    class UiMode(models.TextChoices):
        NATIVE = "native"
        EMBEDDED = "embedded"
        LINK_OUT = "link_out"

    ACTIVE_STATES = (State.REQUESTED, State.STARTING, State.RUNNING, State.STOPPING, State.DECOMMISSIONING)
    LAUNCHING_STATES = (State.REQUESTED, State.STARTING)

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="app_instances")
    project = models.ForeignKey("tenancy.Project", on_delete=models.PROTECT, related_name="app_instances")
    app = models.ForeignKey("catalog.App", on_delete=models.PROTECT, related_name="instances")
    app_version = models.ForeignKey("catalog.AppVersion", on_delete=models.PROTECT, related_name="instances")
    allocation = models.ForeignKey(
        "allocations.Allocation", on_delete=models.PROTECT, related_name="app_instances"
    )
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="app_instances",
    )
    created_by = models.CharField(max_length=255)
    parameters = models.JSONField(default=dict)
    gpus = models.PositiveSmallIntegerField(
        "GPUs", default=0, help_text="GPUs of its node it holds while active"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.REQUESTED, db_index=True)
    state_reason = models.TextField(blank=True)
    shared_with_project = models.BooleanField(default=False)
    ui_mode = models.CharField("UI mode", max_length=10, choices=UiMode.choices, default=UiMode.NATIVE)
    ui_mode_reason = models.CharField("UI mode reason", max_length=255, blank=True)
    # An operator's choice that wins over the platform's decision (seed 002); blank: none.
    ui_mode_override = models.CharField("UI mode override", max_length=10, choices=UiMode.choices, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = "project_id"
    guardian_view_perm = "runtime.view_appinstance"

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["project", "state"], name="instance_project_state"),
            # The platform-wide list (the operations pages), newest first, a page at a time.
            models.Index(fields=["-created_at", "-id"], name="instance_recent"),
        ]

    def __str__(self):
        return f"{self.name} · {self.project.name} · {self.state}"

    @property
    def manifest(self) -> dict:
        return self.app_version.manifest


class InstanceMember(models.Model):
    """The part of an instance on one node (one member for single-node apps)."""

    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="members")
    node = models.ForeignKey("allocations.Node", on_delete=models.PROTECT, related_name="instance_members")
    allocation = models.ForeignKey(
        "allocations.Allocation", null=True, on_delete=models.PROTECT, related_name="instance_members"
    )
    rank = models.PositiveSmallIntegerField(default=0)  # 0 is the primary, which serves the endpoints
    role = models.CharField(max_length=32, default="primary")
    state = models.CharField(
        max_length=16, choices=AppInstance.State.choices, default=AppInstance.State.REQUESTED
    )
    state_reason = models.TextField(blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "node"], name="member_unique_node")]

    def __str__(self):
        return f"{self.instance_id}@{self.node_id}"


class Endpoint(models.Model):
    """Where an instance's endpoint listens, as its agent reported it."""

    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="endpoints")
    name = models.CharField(max_length=40)
    protocol = models.CharField(max_length=8)
    exposure = models.CharField(max_length=16)  # private | platform_proxy
    host = models.CharField(max_length=255, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    reported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "name"], name="endpoint_unique_name")]

    def __str__(self):
        return f"{self.instance_id}/{self.name}"


class RuntimeSecret(models.Model):
    """A per-instance secret the platform makes (the JupyterLab token): its value is in
    the secrets store at ``secret_path``, never in an API answer."""

    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=40)
    secret_path = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "name"], name="secret_unique_name")]

    def __str__(self):
        return f"{self.instance_id}/{self.name}"

    @staticmethod
    def path_for(instance_id, name: str) -> str:
        return f"runtime/instances/{instance_id}/{name}"


class Operation(UUIDModel):
    """A long-running request (launch, stop, start, decommission) and how it went."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    kind = models.CharField(max_length=32)
    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="operations")
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenancy.Project", on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    progress = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    requested_by = models.CharField(max_length=255)
    finished_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.kind} {self.instance.name} · {self.state}"


class InstanceEvent(models.Model):
    """The timeline of an instance: every transition and what caused it."""

    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="events")
    occurred_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=32)
    message = models.TextField()
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    actor = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-occurred_at", "-id"]

    def __str__(self):
        return f"{self.instance_id} {self.kind}"


class AgentTask(UUIDModel):
    """Work for one node's agent: start, stop or remove one instance's workload.

    ``spec`` is rendered by the platform and typed: digest-pinned images only,
    no host paths, no privileged flags, secrets as references.
    """

    class Action(models.TextChoices):
        START = "start"
        STOP = "stop"
        REMOVE = "remove"

    class Status(models.TextChoices):
        PENDING = "pending"
        CLAIMED = "claimed"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    node = models.ForeignKey("allocations.Node", on_delete=models.CASCADE, related_name="agent_tasks")
    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="agent_tasks")
    operation = models.ForeignKey(Operation, null=True, on_delete=models.SET_NULL, related_name="agent_tasks")
    action = models.CharField(max_length=8, choices=Action.choices)
    spec = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["node", "status"], name="agent_task_node_status")]

    def __str__(self):
        return f"{self.action} {self.instance.name} on {self.node.hostname} · {self.status}"


class InstanceLogLine(models.Model):
    """One line of an instance's output (its stdout and stderr, as its node's agent
    ships them), or a marker of how many lines the agent dropped before it. Only the
    newest ``LOG_LINES_KEPT`` per instance stay: every append trims the older ones."""

    id = models.BigAutoField(primary_key=True)  # the order lines arrived in, and the tail's cursor
    instance = models.ForeignKey(AppInstance, on_delete=models.CASCADE, related_name="log_lines")
    received_at = models.DateTimeField(auto_now_add=True)
    text = models.TextField(blank=True)
    dropped = models.PositiveIntegerField(default=0, help_text="lines the agent dropped here (a marker line)")

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["instance", "id"], name="log_line_instance_id")]

    def __str__(self):
        return f"{self.instance_id} #{self.id}"
