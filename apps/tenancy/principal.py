"""Who is calling: a user, a service account, or a federated (CCP JWT) subject,
reduced to a list of role grants the policy reads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from apps.tenancy.roles import Role, permissions_of


@dataclass(frozen=True)
class Grant:
    role: str
    tenant_id: UUID | None = None  # None: platform-wide
    project_id: UUID | None = None  # None: the whole tenant
    limit: str = ""
    service_account: bool = False  # held by a machine identity (see roles.SERVICE_ACCOUNT_REMOVES)

    @property
    def permissions(self) -> frozenset[str]:
        return permissions_of(self.role, self.limit, service_account=self.service_account)


@dataclass
class Principal:
    kind: str  # "user", "service_account" or "federated"
    key: str  # stable identity for idempotency keys and rate limits
    name: str
    grants: list[Grant] = field(default_factory=list)
    user: Any = None
    service_account: Any = None
    claims: dict = field(default_factory=dict)

    @property
    def audit_actor(self) -> str:
        return self.name

    @property
    def audit_actor_type(self) -> str:
        return self.kind

    @property
    def is_platform_admin(self) -> bool:
        return any(g.role == Role.PLATFORM_ADMIN for g in self.grants)

    def as_member(self) -> Principal:
        """The caller with only the grants a tenant gave it. Platform-wide roles manage
        tenants' apps but do not open them: an app's pages run with the session of
        whoever opens it, and an operator's reaches every tenant."""
        return replace(self, grants=[grant for grant in self.grants if grant.tenant_id is not None])

    def can(self, perm: str, tenant_id: UUID | None = None, project_id: UUID | None = None) -> bool:
        """Whether some grant covers ``perm`` on an object of that tenant/project.

        ``project_id=None`` means a tenant-level object: only platform and
        tenant-wide grants act on it.
        """
        for grant in self.grants:
            if perm not in grant.permissions:
                continue
            if grant.tenant_id is None:
                return True
            if grant.tenant_id != tenant_id:
                continue
            if grant.project_id is None or (project_id is not None and grant.project_id == project_id):
                return True
        return False

    def tenant_ids(self) -> set[UUID]:
        return {g.tenant_id for g in self.grants if g.tenant_id is not None}


ANONYMOUS = Principal(kind="anonymous", key="anonymous", name="anonymous")
# Whoever runs an operator's ``manage.py`` command: a platform administrator.
OPERATOR_CLI = Principal(
    kind="operator", key="operator:cli", name="operator (manage.py)", grants=[Grant(Role.PLATFORM_ADMIN)]
)


def for_user(user) -> Principal:
    if user is None or not user.is_authenticated:
        return ANONYMOUS
    grants = [Grant(Role.PLATFORM_ADMIN)] if user.is_superuser else []
    grants += [
        Grant(m.role, m.tenant_id, m.project_id, m.limit)
        for m in user.memberships.all().only("role", "tenant_id", "project_id", "limit", "user_id")
    ]
    return Principal(kind="user", key=f"user:{user.pk}", name=user.get_username(), grants=grants, user=user)


def for_service_account(account, claims: dict | None = None) -> Principal:
    return Principal(
        kind="service_account",
        key=f"sa:{account.pk}",
        name=f"sa:{account.name}",
        grants=[
            Grant(account.role, account.tenant_id, account.project_id, account.limit, service_account=True)
        ],
        service_account=account,
        claims=claims or {},
    )
