"""Platform roles, the permissions each grants, and the CCP role mapping."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    PLATFORM_ADMIN = "platform_admin", "Platform administrator"
    PLATFORM_INTEGRATION = "platform_integration", "Platform integration (CCP)"
    TENANT_OWNER = "tenant_owner", "Tenant owner"
    TENANT_ADMIN = "tenant_admin", "Tenant administrator"
    PROJECT_ADMIN = "project_admin", "Project administrator"
    BILLING_ADMIN = "billing_admin", "Billing administrator"
    VIEWER = "viewer", "Viewer"


class Limit(models.TextChoices):
    NONE = "", "No limit"
    COMPUTE = "compute", "Compute only"
    KUBERNETES = "kubernetes", "Kubernetes only"


PLATFORM_ROLES = {Role.PLATFORM_ADMIN, Role.PLATFORM_INTEGRATION}
TENANT_ONLY_ROLES = {Role.TENANT_OWNER, Role.TENANT_ADMIN, Role.BILLING_ADMIN}
# Roles that may be held on one project (and, for viewer/project_admin, tenant-wide too).
PROJECT_ROLES = {Role.PROJECT_ADMIN, Role.VIEWER}


class Perm(models.TextChoices):
    """Every action the policy decides, one name each."""

    TENANT_VIEW = "tenant.view"
    TENANT_ONBOARD = "tenant.onboard"
    TENANT_SUSPEND = "tenant.suspend"  # platform operators only
    PROJECT_VIEW = "project.view"
    PROJECT_CREATE = "project.create"
    MEMBER_VIEW = "member.view"
    MEMBER_MANAGE = "member.manage"
    SERVICE_ACCOUNT_VIEW = "service_account.view"
    SERVICE_ACCOUNT_MANAGE = "service_account.manage"
    AUDIT_VIEW = "audit.view"
    QUOTA_VIEW = "quota.view"
    QUOTA_MANAGE = "quota.manage"
    USAGE_VIEW = "usage.view"
    BILLING_ADJUST = "billing.adjust"
    ALLOCATION_VIEW = "allocation.view"
    ALLOCATION_MANAGE = "allocation.manage"
    INSTANCE_VIEW = "instance.view"
    INSTANCE_MANAGE = "instance.manage"
    NETWORK_MANAGE = "network.manage"
    STORAGE_MANAGE = "storage.manage"
    NODE_MANAGE = "node.manage"
    CATALOG_VIEW = "catalog.view"
    CATALOG_MANAGE = "catalog.manage"
    PROXY_MANAGE = "proxy.manage"
    SECRET_MANAGE = "secret.manage"  # a project's runtime secrets (write-only values)
    ACCESS_CREDENTIAL_MANAGE = "access_credential.manage"  # a project's SSH key pairs
    ALERT_VIEW = "alert.view"
    ALERT_MANAGE = "alert.manage"


_VIEW = {
    Perm.TENANT_VIEW,
    Perm.PROJECT_VIEW,
    Perm.MEMBER_VIEW,
    Perm.ALLOCATION_VIEW,
    Perm.INSTANCE_VIEW,
    Perm.QUOTA_VIEW,
    Perm.USAGE_VIEW,
    Perm.CATALOG_VIEW,
    Perm.ALERT_VIEW,
}
_PROJECT_ADMIN = _VIEW | {
    Perm.MEMBER_MANAGE,
    Perm.SERVICE_ACCOUNT_VIEW,
    Perm.SERVICE_ACCOUNT_MANAGE,
    Perm.ALLOCATION_MANAGE,
    Perm.INSTANCE_MANAGE,
    Perm.PROXY_MANAGE,
    Perm.SECRET_MANAGE,
    Perm.ACCESS_CREDENTIAL_MANAGE,
}
_TENANT_ADMIN = _PROJECT_ADMIN | {Perm.PROJECT_CREATE, Perm.AUDIT_VIEW, Perm.ALERT_MANAGE}

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    Role.PLATFORM_ADMIN: frozenset(Perm.values),
    Role.PLATFORM_INTEGRATION: frozenset(
        _VIEW
        | {
            Perm.TENANT_ONBOARD,
            Perm.PROJECT_CREATE,
            Perm.QUOTA_MANAGE,
            Perm.ALLOCATION_MANAGE,
            Perm.NETWORK_MANAGE,
            Perm.STORAGE_MANAGE,
            Perm.ALERT_MANAGE,
        }
    ),
    Role.TENANT_OWNER: frozenset(_TENANT_ADMIN),
    Role.TENANT_ADMIN: frozenset(_TENANT_ADMIN),
    Role.PROJECT_ADMIN: frozenset(_PROJECT_ADMIN),
    Role.BILLING_ADMIN: frozenset({Perm.TENANT_VIEW, Perm.PROJECT_VIEW, Perm.QUOTA_VIEW, Perm.USAGE_VIEW}),
    Role.VIEWER: frozenset(_VIEW),
}

# A limited project admin (CCP's Cell VM Admin / Cell Container Admin) loses the
# permissions of the other domain: bare-metal allocation is compute.
LIMIT_REMOVES: dict[str, frozenset[str]] = {
    Limit.NONE: frozenset(),
    Limit.COMPUTE: frozenset(),
    Limit.KUBERNETES: frozenset({Perm.ALLOCATION_MANAGE}),
}


# A service account acts for its project but never manages who else may: a leaked
# machine secret must not mint further members or machine identities.
SERVICE_ACCOUNT_REMOVES = frozenset({Perm.MEMBER_MANAGE, Perm.SERVICE_ACCOUNT_MANAGE})


def permissions_of(role: str, limit: str = "", *, service_account: bool = False) -> frozenset[str]:
    removed = LIMIT_REMOVES.get(limit, frozenset())
    if service_account:
        removed = removed | SERVICE_ACCOUNT_REMOVES
    return ROLE_PERMISSIONS.get(role, frozenset()) - removed


DEFAULT_CCP_ROLE_MAP: dict[str, tuple[str, str]] = {
    "Tenant Super Administrator": (Role.TENANT_OWNER, Limit.NONE),
    "Tenant Administrator": (Role.TENANT_ADMIN, Limit.NONE),
    "Cell Administrator": (Role.PROJECT_ADMIN, Limit.NONE),
    "Cell VM Admin": (Role.PROJECT_ADMIN, Limit.COMPUTE),
    "Cell Container Admin": (Role.PROJECT_ADMIN, Limit.KUBERNETES),
    "Cell Viewer": (Role.VIEWER, Limit.NONE),
    "Tenant Viewer": (Role.VIEWER, Limit.NONE),
    "Tenant Billing Admin": (Role.BILLING_ADMIN, Limit.NONE),
    "GPUaaS Platform Integration": (Role.PLATFORM_INTEGRATION, Limit.NONE),
}
# CCP roles that act on every project of the tenant rather than the token's project.
TENANT_WIDE_CCP_ROLES = {
    "Tenant Super Administrator",
    "Tenant Administrator",
    "Tenant Viewer",
    "Tenant Billing Admin",
}


def ccp_role_map() -> dict[str, tuple[str, str]]:
    """``GPUAAS_CCP_ROLE_MAP`` (``{"CCP role": ["platform_role", "limit"]}``) overrides the default."""
    configured = settings.CCP_ROLE_MAP
    if not configured:
        return DEFAULT_CCP_ROLE_MAP
    return {name: (value[0], value[1] if len(value) > 1 else "") for name, value in configured.items()}
