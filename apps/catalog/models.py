from __future__ import annotations

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from apps.core.models import UUIDModel

# What useradd accepts on every distribution the nodes run (the node agent checks the same).
RUNTIME_USER_VALIDATOR = RegexValidator(
    r"^[a-z_][a-z0-9_-]{0,31}$", "A Unix user name: lower-case letters, digits, _ and -, at most 32."
)


class Flavor(UUIDModel):
    """A GPU node SKU (``h100-8x``): what a tenant asks for when it allocates."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField("GPU model", max_length=64)
    gpus_per_node = models.PositiveSmallIntegerField("GPUs per node", validators=[MinValueValidator(1)])
    cpu_cores = models.PositiveSmallIntegerField("CPU cores")
    memory_gb = models.PositiveIntegerField()
    rate_per_node_hour = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    description = models.CharField(max_length=200, blank=True)
    # The login the pipeline's agent step creates on each node of this flavor; the
    # allocations read it here because the access app, which manages its keys, sits above them.
    runtime_user = models.CharField(
        max_length=32,
        default="gpuaas",
        validators=[RUNTIME_USER_VALIDATOR],
        help_text="the Unix user made on each allocated node for SSH access",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class App(UUIDModel):
    """A catalog entry (``jupyterlab``); what runs is one of its versions."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=100)
    summary = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    publisher = models.CharField(max_length=100, default="GPUaaS platform")
    # Every tenant is entitled (platform apps); otherwise Entitlement rows decide.
    entitled_to_all = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def latest_version(self):
        return self.versions.filter(status=AppVersion.Status.PUBLISHED).order_by("-published_at").first()


class AppVersion(UUIDModel):
    class Status(models.TextChoices):
        DRAFT = "draft"
        PUBLISHED = "published"
        DEPRECATED = "deprecated"

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=32)
    manifest = models.JSONField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.DRAFT)
    published_at = models.DateTimeField(null=True, blank=True)
    published_by = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["app", "-published_at"]
        constraints = [models.UniqueConstraint(fields=["app", "version"], name="app_version_unique")]

    def __str__(self):
        return f"{self.app.slug} {self.version}"


class Artifact(models.Model):
    """An OCI image variant of a version, pinned by digest (copied from the manifest at publish)."""

    app_version = models.ForeignKey(AppVersion, on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=40)
    image = models.CharField(max_length=255)
    digest = models.CharField(max_length=71)
    platform = models.CharField(max_length=16, default="linux/amd64")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["app_version", "name"], name="artifact_unique_name")]

    def __str__(self):
        return f"{self.image}@{self.digest}"

    @property
    def reference(self) -> str:
        return f"{self.image}@{self.digest}"


class Entitlement(UUIDModel):
    """A tenant (or one of its projects) may see and launch an app."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="entitlements")
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="entitlements")
    project = models.ForeignKey(
        "tenancy.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="entitlements"
    )
    granted_by = models.CharField(max_length=255, blank=True)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["app", "tenant"],
                condition=models.Q(project__isnull=True),
                name="entitlement_unique_tenant",
            ),
            models.UniqueConstraint(
                fields=["app", "project"],
                condition=models.Q(project__isnull=False),
                name="entitlement_unique_project",
            ),
        ]

    def __str__(self):
        return f"{self.app.slug} -> {self.project or self.tenant}"
