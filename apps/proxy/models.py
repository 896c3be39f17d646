"""Proxy pools (the runtimes that serve app UIs) and the routes they serve (seed 003)."""

from django.conf import settings
from django.db import models

from apps.core.models import UUIDModel


class ProxyPool(UUIDModel):
    class Scope(models.TextChoices):
        SHARED = "shared"
        TENANT = "tenant"
        PROJECT = "project"
        APP_INSTANCE = "app_instance"

    class Status(models.TextChoices):
        REQUESTED = "requested"
        PROVISIONING = "provisioning"
        ACTIVE = "active"
        FAILED = "failed"
        DELETING = "deleting"
        DELETED = "deleted"

    name = models.CharField(max_length=100, unique=True)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.SHARED)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="proxy_pools"
    )
    project = models.ForeignKey(
        "tenancy.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="proxy_pools"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    # Blank: the platform's own host (path_prefix routes) or GPUAAS_APPS_DOMAIN (subdomain routes).
    hostname = models.CharField(max_length=255, blank=True)
    # Concurrent connections; the platform's hard limits cap them.
    limits = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class ProxyRoute(UUIDModel):
    class OwnerType(models.TextChoices):
        APP_INSTANCE = "app_instance"
        PLATFORM_SERVICE = "platform_service"

    class Mode(models.TextChoices):
        SUBDOMAIN = "subdomain"
        PATH_PREFIX = "path_prefix"

    class Status(models.TextChoices):
        PENDING = "pending"  # waiting for the app to report its upstream
        ACTIVE = "active"
        REMOVED = "removed"  # the app stopped; kept so its URL explains why and comes back on start

    owner_type = models.CharField(max_length=20, choices=OwnerType.choices, default=OwnerType.APP_INSTANCE)
    instance = models.ForeignKey(
        "runtime.AppInstance", null=True, blank=True, on_delete=models.CASCADE, related_name="proxy_routes"
    )
    service_name = models.CharField(max_length=64, blank=True)
    endpoint_name = models.CharField(max_length=40)
    pool = models.ForeignKey(ProxyPool, on_delete=models.PROTECT, related_name="routes")
    mode = models.CharField(max_length=12, choices=Mode.choices)
    slug = models.SlugField(max_length=63, unique=True)
    public_url = models.CharField("public URL", max_length=500)
    upstream_host = models.CharField(max_length=255, blank=True)
    upstream_port = models.PositiveIntegerField(null=True, blank=True)
    # The adapter (seed 003) and the limits in force, fixed when the route is made.
    policy = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    status_reason = models.CharField(max_length=255, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "instance__tenant_id"
    project_path = "instance__project_id"

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "endpoint_name"],
                condition=models.Q(owner_type="app_instance"),
                name="route_unique_instance_endpoint",
            )
        ]

    def __str__(self):
        return self.public_url

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` of the route: the portal's, or its own on a subdomain."""
        return "/".join(self.public_url.split("/", 3)[:3])

    @property
    def host(self) -> str:
        return self.public_url.split("/", 3)[2]


class ProxySession(models.Model):
    """The platform session a route cookie hangs on, by the digest the cookie names.

    The grant decision reads it to check that platform session in the session store
    itself: ended by logout, rotated at login, or made stale by a password change, the
    route cookie stops working, whatever any cache forgot in the meantime (a restart,
    an evicted key). Rows are pruned once no cookie minted from them can be alive."""

    digest = models.CharField(max_length=32, primary_key=True)
    session_key = models.CharField(max_length=40)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self):
        return f"proxy session of {self.user_id}"
