"""Host access: runtime users, SSH access credentials, authorized keys, the web terminal."""

from __future__ import annotations

from django.conf import settings
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

    @property
    def scope_ids(self):
        return self.tenant_id, self.project_id


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

    def __str__(self):
        return f"{self.node_id}: {self.user}@:{self.port}"


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
        return f"{self.fingerprint} on {self.allocation_id}"

    @property
    def scope_ids(self):
        return self.allocation.tenant_id, self.allocation.project_id


class UserSshKey(UUIDModel):
    """A public key a user keeps in their profile: added to every new allocation of
    the projects where they may manage allocations."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100, blank=True)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="user_ssh_key_once_per_user")
        ]

    def __str__(self):
        return f"{self.user_id}: {self.name or self.fingerprint}"
