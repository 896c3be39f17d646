from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from apps.core.models import UUIDModel
from apps.tenancy.roles import PLATFORM_ROLES, PROJECT_ROLES, Limit, Role

ccp_identifier = RegexValidator(
    r"^[A-Za-z0-9._-]{1,64}$", "1-64 characters of A-Z, a-z, 0-9, '.', '_' or '-'."
)


class Tenant(UUIDModel):
    class Status(models.TextChoices):
        ONBOARDING = "onboarding"
        ACTIVE = "active"
        FAILED = "failed"
        SUSPENDED = "suspended"

    tenant_id = models.CharField("CCP tenant id", max_length=64, unique=True, validators=[ccp_identifier])
    name = models.CharField(max_length=200)
    realm_name = models.CharField(max_length=200, blank=True)
    tier = models.CharField(max_length=32, default="standard")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ONBOARDING)
    status_reason = models.TextField(blank=True)
    # Tenant policy keys (e.g. ``proxy.allowed_scopes``), read by the domains that own them.
    policy = models.JSONField(default=dict, blank=True)

    # Scope declaration for ``policy.restrict``: the path to the tenant; tenant-level
    # objects are visible to members of any of the tenant's projects.
    tenant_path = "id"
    project_path = None
    visible_to_project_members = True

    class Meta:
        ordering = ["name"]
        # The platform-wide project list walks tenants in this order (Project.LIST_ORDER).
        indexes = [models.Index(fields=["name", "id"], name="tenant_name_order")]

    def __str__(self):
        return self.name

    def admits_realm(self, realm) -> bool:
        """Whether a token's ``realm_name`` claim (the CCP tenant realm) may name this
        tenant: none is claimed, the tenant was onboarded without one, or it is its own."""
        return realm is None or not self.realm_name or realm == self.realm_name


class Quota(UUIDModel):
    """A tenant's limit for one resource (``gpus``, ``nodes``, ``storage_gb``, ...);
    the domains that hold those resources check it (``apps.tenancy.quotas``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    resource = models.CharField(max_length=64)
    limit = models.BigIntegerField()

    tenant_path = "tenant_id"
    project_path = None

    class Meta:
        ordering = ["resource"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "resource"], name="quota_unique_resource"),
            models.CheckConstraint(condition=models.Q(limit__gte=0), name="quota_limit_not_negative"),
        ]

    def __str__(self):
        return f"{self.tenant_id} {self.resource}={self.limit}"


# Lists of projects, by tenant name then name. The tenant's id after its name, and the
# indexes on both, let a page be read in index order, a page's worth of tenants at a
# time, instead of sorting every project of the platform for each page.
PROJECT_LIST_ORDER = ("tenant__name", "tenant_id", "name", "id")


class Project(UUIDModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="projects")
    project_id = models.CharField("CCP project id", max_length=64, validators=[ccp_identifier])
    name = models.CharField(max_length=200)
    # Project policy keys chosen within the tenant's bounds (e.g. ``proxy.scope``).
    policy = models.JSONField(default=dict, blank=True)

    tenant_path = "tenant_id"
    project_path = "id"

    LIST_ORDER = PROJECT_LIST_ORDER

    class Meta:
        ordering = list(PROJECT_LIST_ORDER)
        constraints = [models.UniqueConstraint(fields=["tenant", "project_id"], name="project_unique_ccp_id")]

    def __str__(self):
        return f"{self.tenant.name} / {self.name}"


class Membership(UUIDModel):
    """A user's role: platform-wide (no tenant), tenant-wide (no project) or on one project."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=32, choices=Role.choices)
    limit = models.CharField(max_length=16, choices=Limit.choices, default=Limit.NONE, blank=True)
    # IDP: mirrored from the identity provider's claims at each login, replaced then.
    IDP = "idp"
    source = models.CharField(max_length=8, default="local", editable=False)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        ordering = ["user__username"]
        constraints = [
            # Three partial constraints rather than NULLS NOT DISTINCT, which SQLite lacks.
            models.UniqueConstraint(
                fields=["user", "role"], condition=Q(tenant__isnull=True), name="membership_unique_platform"
            ),
            models.UniqueConstraint(
                fields=["user", "tenant", "role"],
                condition=Q(project__isnull=True),
                name="membership_unique_tenant",
            ),
            models.UniqueConstraint(
                fields=["user", "project", "role"],
                condition=Q(project__isnull=False),
                name="membership_unique_project",
            ),
            models.CheckConstraint(
                name="membership_scope_matches_role",
                condition=(
                    Q(role__in=PLATFORM_ROLES, tenant__isnull=True, project__isnull=True)
                    | Q(tenant__isnull=False, project__isnull=True) & ~Q(role__in=PLATFORM_ROLES)
                    | Q(tenant__isnull=False, project__isnull=False, role__in=PROJECT_ROLES)
                ),
            ),
        ]

    def __str__(self):
        where = self.project or self.tenant or "platform"
        return f"{self.user} {self.role} on {where}"


class ServiceAccount(UUIDModel):
    """A machine identity: project-scoped for automation, or platform-scoped (CCP)."""

    name = models.CharField(max_length=100)
    client_id = models.CharField(max_length=64, unique=True)
    secret_hash = models.CharField(max_length=64)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="service_accounts"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="service_accounts"
    )
    role = models.CharField(max_length=32, choices=Role.choices)
    limit = models.CharField(max_length=16, choices=Limit.choices, default=Limit.NONE, blank=True)
    created_by = models.CharField(max_length=255, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_token_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "tenant_id"
    project_path = "project_id"

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                name="service_account_scope_matches_role",
                condition=(
                    Q(role__in=PLATFORM_ROLES, tenant__isnull=True, project__isnull=True)
                    | Q(role__in=PROJECT_ROLES, tenant__isnull=False, project__isnull=False)
                ),
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class ExternalIdentity(models.Model):
    """Links an IdP subject to a local user: users are matched on ``(issuer, sub)``, never on email."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique_subject")]

    def __str__(self):
        return f"{self.issuer}#{self.subject}"


class SigningKey(models.Model):
    """The platform's token signing keys; private halves in the secrets store."""

    kid = models.CharField(max_length=64, unique=True)
    secret_path = models.CharField(max_length=255, editable=False)
    public_jwk = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return self.kid

    @staticmethod
    def path_for(kid: str) -> str:
        return f"tenancy/signing-keys/{kid}"
