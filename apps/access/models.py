"""Host access: runtime users, SSH access credentials, authorized keys, the web terminal."""

from __future__ import annotations

from django.db import models

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
