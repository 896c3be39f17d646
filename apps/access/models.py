"""Host access: runtime users, SSH access credentials, authorized keys, the web terminal."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from apps.core.models import UUIDModel

# --- Secrets custody: project access credentials and project secrets -----------------
# The values live in the secrets store (apps/core/secrets) at ``secret_path``; these
# records hold what may be shown: names, the public half, who made them and when.


class ProjectScoped(UUIDModel):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenancy.Project", on_delete=models.CASCADE, related_name="+")
    secret_path = models.CharField(max_length=255, editable=False)
    created_by = models.CharField(max_length=255)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        abstract = True


class AccessCredential(ProjectScoped):
    """An SSH key pair of a project (seed 000 section 6): the platform made it; the
    private half is shown once at creation and then delivered only to the project's
    app controller."""

    name = models.CharField(max_length=100)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=100)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="access_credential_unique_name")
        ]

    def __str__(self):
        return self.name

    @staticmethod
    def path_for(pk) -> str:
        return f"access/credentials/{pk}"


class ProjectSecret(ProjectScoped):
    """A value a project's admins supply for their apps (a Hugging Face token): write-only,
    named by a manifest parameter of type ``secret`` and fetched by the node agent."""

    name = models.CharField(max_length=64)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="project_secret_unique_name")]

    def __str__(self):
        return self.name

    @staticmethod
    def path_for(pk) -> str:
        return f"access/project-secrets/{pk}"


# --- Runtime users and SSH keys ------------------------------------------------------
# The node's SSH server as its agent reported it, the keys on an allocation's runtime
# user, and the keys users keep in their profile.


class NodeSshHost(models.Model):
    """What the node's agent last reported about its SSH server: the login it manages
    (the flavor's runtime user; on the embedded default, the portal's own user), the
    port and the host's public keys, which users check the host against."""

    node = models.OneToOneField("allocations.Node", on_delete=models.CASCADE, related_name="ssh_host")
    user = models.CharField(max_length=32)
    port = models.PositiveIntegerField()
    host_keys = models.JSONField(default=list, help_text="public host keys, one OpenSSH line each")
    reported_at = models.DateTimeField()

    class Meta:
        verbose_name = "node SSH host"

    def __str__(self):
        return f"{self.user}@{self.node.hostname}:{self.port}"


class AuthorizedKey(UUIDModel):
    """One public key on an allocation's runtime user, owned by the principal that added it.

    The agent reconciles the node from these rows: ``pending`` rows are written into the
    managed block and become ``applied`` once the agent reports them there; ``removing``
    rows are taken out of it and deleted once the agent reports them gone.
    """

    class Purpose(models.TextChoices):
        USER = "user"
        BOOTSTRAP = "bootstrap"

    class State(models.TextChoices):
        PENDING = "pending"
        APPLIED = "applied"
        REMOVING = "removing"

    LIVE_STATES = (State.PENDING, State.APPLIED)

    allocation = models.ForeignKey(
        "allocations.Allocation", on_delete=models.CASCADE, related_name="authorized_keys"
    )
    public_key = models.TextField(help_text="normalised: type and base64 key, no comment or options")
    comment = models.CharField(max_length=100, blank=True)
    fingerprint = models.CharField(max_length=64)
    purpose = models.CharField(max_length=10, choices=Purpose.choices, default=Purpose.USER)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    owner = models.CharField(max_length=255, help_text="the principal that added it, as audited")
    owner_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    owner_service_account = models.ForeignKey(
        "tenancy.ServiceAccount", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    applied_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "allocation__tenant_id"
    project_path = "allocation__project_id"

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "fingerprint"],
                condition=Q(state__in=["pending", "applied"]),
                name="authorized_key_once_per_allocation",
            )
        ]

    def __str__(self):
        return f"{self.fingerprint} on {self.allocation.node.hostname}"


class UserSshKey(UUIDModel):
    """A public key a user keeps in their profile: added to every new allocation of
    the projects where they may manage allocations."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100, blank=True)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64)

    class Meta:
        verbose_name = "user SSH key"
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="user_ssh_key_once_per_user")
        ]

    def __str__(self):
        return f"{self.user_id}: {self.name or self.fingerprint}"


# --- web terminal (issue 17) ------------------------------------------------------
# A terminal session is a login shell as the allocation's runtime user, on a PTY the
# node agent holds, relayed to the browser through the portal (apps/access/consumers.py).
# Its output is recorded as asciicast v2 in chunks, kept per the project's policy.


class TerminalPolicy(UUIDModel):
    """A project's terminal limits; a project without a row has the defaults."""

    DEFAULT_IDLE_TIMEOUT_SECONDS = 30 * 60
    DEFAULT_MAX_DURATION_SECONDS = 8 * 3600
    DEFAULT_RECORDING_RETENTION_DAYS = 30

    project = models.OneToOneField(
        "tenancy.Project", on_delete=models.CASCADE, related_name="terminal_policy"
    )
    idle_timeout_seconds = models.PositiveIntegerField(
        default=DEFAULT_IDLE_TIMEOUT_SECONDS,
        validators=[MinValueValidator(60), MaxValueValidator(7 * 24 * 3600)],
        help_text="a session with no keystroke for this long is ended",
    )
    max_duration_seconds = models.PositiveIntegerField(
        default=DEFAULT_MAX_DURATION_SECONDS,
        validators=[MinValueValidator(60), MaxValueValidator(30 * 24 * 3600)],
        help_text="a session is ended this long after it opened, busy or not",
    )
    recording_retention_days = models.PositiveSmallIntegerField(
        default=DEFAULT_RECORDING_RETENTION_DAYS,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text="recordings older than this are deleted",
    )

    tenant_path = "project__tenant_id"
    project_path = "project_id"

    class Meta:
        verbose_name_plural = "terminal policies"

    def __str__(self):
        return f"terminal policy of {self.project_id}"


class TerminalSession(UUIDModel):
    """One shell on an allocation's node, from open to end."""

    class State(models.TextChoices):
        OPENING = "opening"  # asked of the node agent, which has not connected yet
        OPEN = "open"
        ENDED = "ended"

    LIVE_STATES = (State.OPENING, State.OPEN)

    allocation = models.ForeignKey(
        "allocations.Allocation", on_delete=models.PROTECT, related_name="terminal_sessions"
    )
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey("tenancy.Project", on_delete=models.PROTECT, related_name="+")
    node = models.ForeignKey("allocations.Node", on_delete=models.PROTECT, related_name="terminal_sessions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="terminal_sessions"
    )
    username = models.CharField(max_length=150, help_text="who opened it, kept when the user is deleted")
    runtime_user = models.CharField(max_length=32)
    # The browser session that opened it (a SHA-256 of its key): its logout ends the terminal.
    login_session = models.CharField(max_length=64, blank=True, db_index=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.OPENING, db_index=True)
    cols = models.PositiveSmallIntegerField(default=80)
    rows = models.PositiveSmallIntegerField(default=24)
    idle_timeout_seconds = models.PositiveIntegerField()
    max_duration_seconds = models.PositiveIntegerField()
    last_input_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    output_bytes = models.BigIntegerField(default=0, help_text="bytes the shell wrote")
    # The recording: asciicast v2 events for output bytes [0, recorded_bytes).
    recorded_bytes = models.BigIntegerField(default=0)
    recording_chars = models.BigIntegerField(default=0, help_text="size of the stored recording")
    recording_truncated = models.BooleanField(default=False)
    recording_deleted = models.BooleanField(default=False)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["allocation", "-created_at"], name="terminal_allocation_recent"),
            models.Index(fields=["user", "state"], name="terminal_user_state"),
        ]

    def __str__(self):
        return f"terminal of {self.username} on {self.node.hostname} · {self.state}"

    @property
    def is_live(self) -> bool:
        return self.state in self.LIVE_STATES


class TerminalRecordingChunk(models.Model):
    """A run of asciicast v2 event lines (newline-terminated), in order of ``seq``."""

    session = models.ForeignKey(TerminalSession, on_delete=models.CASCADE, related_name="recording_chunks")
    seq = models.PositiveIntegerField()
    events = models.TextField()

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="terminal_chunk_seq")]
