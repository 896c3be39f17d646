"""Tenancy operations: onboarding, projects, members, service accounts, tokens.

Each takes the calling ``Principal`` first, checks policy, changes state
atomically, writes audit and enqueues follow-up work after commit.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import QuerySet, Sum
from django.dispatch import Signal
from django.utils import timezone

from apps.core import audit, bounds, crypto, wakeups
from apps.core.errors import Conflict, Forbidden, InvalidState, Unauthenticated, ValidationFailed
from apps.core.models import AuditEvent
from apps.tenancy import policy, quotas
from apps.tenancy.auth import platform_tokens
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import PLATFORM_ROLES, PROJECT_ROLES, TENANT_ONLY_ROLES, Perm, Role, permissions_of

DEFAULT_PROJECT_ID = "default"
# Revoked service accounts a project keeps (listed as revoked); revoking one more deletes
# the longest revoked, so creating and revoking in a loop cannot grow the table.
REVOKED_ACCOUNTS_KEPT = 20
# Sent (with ``account``) once a service account is revoked, inside the revoking
# transaction: apps above take away what it held (its SSH keys on nodes).
service_account_revoked = Signal()
# Sent (with ``tenant``) once a tenant is suspended or reactivated, inside that
# transaction: apps above end or give back its interactive access (terminals, app
# routes; its SSH keys follow its status by themselves).
tenant_suspension_changed = Signal()


@dataclass
class Created:
    """An object and whether this call made it (False: it already existed)."""

    obj: object
    created: bool


# --- onboarding --------------------------------------------------------------


def onboard_tenant(
    principal: Principal,
    *,
    tenant_id: str,
    name: str,
    realm_name: str = "",
    tier: str = "standard",
    quota: dict | None = None,
    projects: list[dict] | None = None,
) -> Created:
    """Create a tenant with its projects and quota, then provision it asynchronously.

    Idempotent per ``tenant_id``: onboarding an existing tenant returns it unchanged.
    """
    policy.require_scope(principal, Perm.TENANT_ONBOARD)
    existing = Tenant.objects.filter(tenant_id=tenant_id).first()
    if existing is not None:
        return Created(existing, False)
    if quota:
        errors = quotas.validate_quota(quota)
        if errors:
            raise ValidationFailed(details={"quota": [errors]})
    projects = projects or [{"project_id": DEFAULT_PROJECT_ID, "name": "Default"}]
    if len(projects) > settings.MAX_PROJECTS_PER_TENANT:
        raise ValidationFailed(
            details={"projects": [f"A tenant has at most {settings.MAX_PROJECTS_PER_TENANT} projects."]}
        )
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(
                tenant_id=tenant_id, name=name, realm_name=realm_name or tenant_id, tier=tier
            )
            for item in projects:
                Project.objects.create(tenant=tenant, project_id=item["project_id"], name=item["name"])
            quotas.set_quota(tenant, {**quotas.default_quota(), **(quota or {})})
            audit.record(principal, "tenant.onboard", target=tenant, details={"tier": tier})
            transaction.on_commit(lambda: _start_provisioning(tenant.pk))
    except IntegrityError:
        # A concurrent onboarding of the same tenant_id won the race.
        return Created(Tenant.objects.get(tenant_id=tenant_id), False)
    return Created(tenant, True)


def _start_provisioning(tenant_pk) -> None:
    from apps.tenancy.tasks import provision_tenant

    wakeups.wake(provision_tenant, str(tenant_pk))  # resume_onboarding sweeps a missed one


def provision_tenant(tenant_pk) -> Tenant:
    """Run the onboarding steps (network, storage) and activate the tenant.

    Safe to run twice: a tenant that is no longer onboarding is left alone.
    """
    from apps.tenancy import onboarding

    tenant = Tenant.objects.get(pk=tenant_pk)
    if tenant.status != Tenant.Status.ONBOARDING:
        return tenant
    try:
        for step in onboarding.STEPS:
            step(tenant)
    except onboarding.StepFailed as exc:
        Tenant.objects.filter(pk=tenant.pk, status=Tenant.Status.ONBOARDING).update(
            status_reason=str(exc), updated_at=timezone.now()
        )
        if exc.final:
            _transition(tenant, Tenant.Status.FAILED, str(exc))
        raise
    _transition(tenant, Tenant.Status.ACTIVE, "")
    tenant.refresh_from_db()
    return tenant


def _transition(tenant: Tenant, status: str, reason: str) -> bool:
    changed = Tenant.objects.filter(pk=tenant.pk, status=Tenant.Status.ONBOARDING).update(
        status=status, status_reason=reason, updated_at=timezone.now()
    )
    if changed:
        audit.record(None, f"tenant.{status}", target=tenant, details={"reason": reason} if reason else {})
    return bool(changed)


# --- suspension (decision 0078) ------------------------------------------------


def refusal_reason(tenant: Tenant, *, onboarded: bool = False) -> str:
    """Why the tenant may take, add or open nothing new now (empty when it may): it is
    suspended; or, for what lives on the network and storage onboarding provisions
    (``onboarded``: allocations), it is not active yet."""
    if tenant.status == Tenant.Status.SUSPENDED:
        return (
            "The tenant is suspended. Reads, releases, stops and deletions still work; "
            "ask the platform operators to reactivate it."
        )
    if onboarded and tenant.status != Tenant.Status.ACTIVE:
        return f"The tenant is {tenant.status}, not active."
    return ""


def require_not_suspended(tenant: Tenant, *, onboarded: bool = False) -> None:
    """The one check every service makes before the tenant takes, adds or opens
    something (409 ``invalid_state``, ``refusal_reason``); reads and what gives resources
    back never make it. Pass the tenant's row as the caller locked it where a race with
    a suspension matters."""
    reason = refusal_reason(tenant, onboarded=onboarded)
    if reason:
        raise InvalidState(reason)


def suspend_tenant(principal: Principal, tenant: Tenant, reason: str) -> Tenant:
    """Operator action: the tenant keeps what it holds (and is metered for it) and its
    reads, but takes, adds and opens nothing new, and its interactive access ends
    (the receivers of ``tenant_suspension_changed``). Suspending a suspended tenant
    changes nothing."""
    policy.require_scope(principal, Perm.TENANT_SUSPEND)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(details={"reason": ["Say why the tenant is suspended."]})
    return _move(principal, tenant, Tenant.Status.SUSPENDED, reason)


def reactivate_tenant(principal: Principal, tenant: Tenant) -> Tenant:
    """Operator action: the end of a suspension. What it held is as it was; its users'
    SSH keys go back on its nodes without being added again."""
    policy.require_scope(principal, Perm.TENANT_SUSPEND)
    return _move(principal, tenant, Tenant.Status.ACTIVE, "")


# Each move of a suspension: the status it leaves, its audit action, what refusing says.
_MOVES = {
    Tenant.Status.SUSPENDED: (
        Tenant.Status.ACTIVE,
        "tenant.suspend",
        "Only an active tenant can be suspended",
    ),
    Tenant.Status.ACTIVE: (
        Tenant.Status.SUSPENDED,
        "tenant.reactivate",
        "Only a suspended tenant can be reactivated",
    ),
}


def _move(principal: Principal, tenant: Tenant, status: str, reason: str) -> Tenant:
    source, action, refusal = _MOVES[status]
    with transaction.atomic():
        # Locked as allocating and launching lock it: one that is under way commits before
        # the suspension, and the next one sees it.
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if locked.status == status:
            return locked
        if locked.status != source:
            raise InvalidState(f"{refusal}; this one is {locked.status}.")
        details = {"reason": reason} if reason else {"suspended_for": locked.status_reason}
        _set_status(locked, status, reason)
        audit.record(principal, action, target=locked, details=details)
        tenant_suspension_changed.send(sender=Tenant, tenant=locked)
    return locked


def _set_status(tenant: Tenant, status: str, reason: str) -> None:
    tenant.status, tenant.status_reason = status, reason
    tenant.save(update_fields=["status", "status_reason", "updated_at"])


# --- projects ----------------------------------------------------------------


def create_project(principal: Principal, tenant: Tenant, *, project_id: str, name: str) -> Created:
    """Idempotent per ``(tenant, project_id)``; a tenant has at most
    ``MAX_PROJECTS_PER_TENANT`` (409 past that)."""
    policy.require(principal, Perm.PROJECT_CREATE, tenant)
    existing = Project.objects.filter(tenant=tenant, project_id=project_id).first()
    if existing is not None:
        return Created(existing, False)
    require_not_suspended(tenant)
    limit = settings.MAX_PROJECTS_PER_TENANT
    try:
        with transaction.atomic():
            # Counted without this id: the same project made by a concurrent request
            # while this one waited for the lock is answered as existing (below), not
            # as a tenant with no room.
            bounds.require_room(
                tenant,
                Project.objects.filter(tenant=tenant).exclude(project_id=project_id),
                limit,
                resource="projects",
                message=f"A tenant has at most {limit} projects.",
            )
            project = Project.objects.create(tenant=tenant, project_id=project_id, name=name)
            audit.record(principal, "project.create", target=project)
    except IntegrityError:
        return Created(Project.objects.get(tenant=tenant, project_id=project_id), False)
    return Created(project, True)


# --- members -----------------------------------------------------------------


def add_member(
    principal: Principal, project: Project, *, username: str, role: str, limit: str = ""
) -> Membership:
    _require_project_grant(principal, Perm.MEMBER_MANAGE, project, role, limit, holder="Project")
    require_not_suspended(project.tenant)
    users = get_user_model().objects.filter(username=username)
    if not principal.can(Perm.MEMBER_MANAGE, project.tenant_id):
        # A project admin may only add people already in the tenant; tenant admins may bring anyone in.
        users = users.filter(memberships__tenant_id=project.tenant_id)
    user = users.distinct().first()
    if user is None:
        # One answer (and one query) whether the username is unknown or belongs to someone
        # outside the tenant: a project admin must not learn who has accounts elsewhere.
        raise ValidationFailed(details={"username": ["No user with this username in this tenant."]})
    try:
        with transaction.atomic():
            membership = Membership.objects.create(
                user=user, tenant=project.tenant, project=project, role=role, limit=limit
            )
            audit.record(principal, "member.add", target=membership, details={"user": username, "role": role})
    except IntegrityError:
        raise Conflict("This user already has this role in the project.") from None
    return membership


def remove_member(principal: Principal, membership: Membership) -> None:
    policy.require(principal, Perm.MEMBER_MANAGE, membership)
    _require_revocable(principal, membership, "member.remove")
    if membership.source == Membership.IDP:
        # Mirrored from the identity provider at each sign-in: removed here, it would
        # come back at the user's next sign-in.
        raise InvalidState(
            f"{membership.user.get_username()}'s role comes from the identity provider; change it there."
        )
    with transaction.atomic():
        audit.record(
            principal,
            "member.remove",
            target=membership,
            details={"user": membership.user.get_username(), "role": membership.role},
        )
        membership.delete()


def grant_tenant_role(principal: Principal, tenant: Tenant, *, user, role: str) -> Membership:
    """Tenant-wide roles (owner, admin, billing admin, viewer)."""
    policy.require(principal, Perm.MEMBER_MANAGE, tenant)
    if role not in TENANT_ONLY_ROLES | {Role.VIEWER, Role.PROJECT_ADMIN}:
        raise ValidationFailed(details={"role": ["Not a tenant role."]})
    if not _grantable(principal, tenant.id, None, role, ""):
        raise ValidationFailed(details={"role": ["You cannot grant a role above your own."]})
    require_not_suspended(tenant)
    membership, created = Membership.objects.get_or_create(user=user, tenant=tenant, project=None, role=role)
    if created:
        audit.record(
            principal, "member.add", target=membership, details={"user": user.get_username(), "role": role}
        )
    return membership


def _grantable(principal: Principal, tenant_id, project_id, role: str, limit: str) -> bool:
    """Nobody hands out, or takes away, more than they hold there: a project admin
    limited to Kubernetes can neither make nor remove an unlimited (bare-metal)
    admin, member or machine."""
    return all(principal.can(perm, tenant_id, project_id) for perm in permissions_of(role, limit))


def _require_project_grant(
    principal: Principal, perm: str, project: Project, role: str, limit: str, *, holder: str
) -> None:
    """``perm`` on the project, and ``role`` a project role the caller may grant there."""
    policy.require(principal, perm, project)
    if role not in PROJECT_ROLES:
        raise ValidationFailed(details={"role": [f"{holder} roles are {sorted(PROJECT_ROLES)}."]})
    if not _grantable(principal, project.tenant_id, project.id, role, limit):
        raise ValidationFailed(details={"role": ["You cannot grant a role above your own."]})


def may_remove(principal: Principal, holder: Membership | ServiceAccount) -> bool:
    """Removal and revocation follow the grant rule: what one could not grant, one cannot take."""
    return _grantable(principal, holder.tenant_id, holder.project_id, holder.role, holder.limit)


def _require_revocable(principal: Principal, holder: Membership | ServiceAccount, action: str) -> None:
    if may_remove(principal, holder):
        return
    audit.record(principal, action, target=holder, outcome=audit.DENIED, details={"reason": "role above own"})
    raise Forbidden("You cannot remove a role above your own.")


# --- service accounts --------------------------------------------------------


@dataclass
class IssuedServiceAccount:
    account: ServiceAccount
    client_secret: str  # shown once, never stored


def _new_account(
    principal: Principal | None,
    *,
    name: str,
    role: str,
    tenant=None,
    project=None,
    limit: str = "",
) -> IssuedServiceAccount:
    secret = crypto.new_secret()
    with transaction.atomic():
        if project is not None:
            most = settings.MAX_SERVICE_ACCOUNTS_PER_PROJECT
            bounds.require_room(
                project,
                ServiceAccount.objects.filter(project=project, revoked_at__isnull=True),
                most,
                resource="service_accounts",
                message=f"A project has at most {most} active service accounts; revoke one first.",
            )
        account = ServiceAccount.objects.create(
            name=name,
            client_id=f"sa-{secrets.token_hex(12)}",
            secret_hash=crypto.hash_secret(secret),
            tenant=tenant,
            project=project,
            role=role,
            limit=limit,
            created_by=principal.name if principal else "operator",
        )
        audit.record(
            principal,
            "service_account.create",
            target=account,
            details={"client_id": account.client_id, "role": role},
        )
    return IssuedServiceAccount(account, secret)


def create_service_account(
    principal: Principal, project: Project, *, name: str, role: str, limit: str = ""
) -> IssuedServiceAccount:
    _require_project_grant(
        principal, Perm.SERVICE_ACCOUNT_MANAGE, project, role, limit, holder="Service account"
    )
    require_not_suspended(project.tenant)
    return _new_account(principal, name=name, role=role, tenant=project.tenant, project=project, limit=limit)


def create_platform_service_account(
    principal: Principal | None, *, name: str, role: str
) -> IssuedServiceAccount:
    """Operators only (management command, admin): platform-wide machine identities such as CCP."""
    if role not in PLATFORM_ROLES:
        raise ValidationFailed(details={"role": [f"Platform roles are {sorted(PLATFORM_ROLES)}."]})
    return _new_account(principal, name=name, role=role)


def revoke_service_account(principal: Principal | None, account: ServiceAccount) -> ServiceAccount:
    """Takes effect at once: bearer authentication checks revocation on every request."""
    if principal is not None and account.project_id is not None:
        policy.require(principal, Perm.SERVICE_ACCOUNT_MANAGE, account)
        _require_revocable(principal, account, "service_account.revoke")
    elif principal is not None and not principal.is_platform_admin:
        policy.require_scope(principal, Perm.SERVICE_ACCOUNT_MANAGE)
    with transaction.atomic():
        updated = ServiceAccount.objects.filter(pk=account.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), updated_at=timezone.now()
        )
        account.refresh_from_db()
        if updated:
            audit.record(
                principal, "service_account.revoke", target=account, details={"client_id": account.client_id}
            )
            service_account_revoked.send(sender=ServiceAccount, account=account)
            if account.project_id is not None:
                revoked = ServiceAccount.objects.filter(
                    project_id=account.project_id, revoked_at__isnull=False
                )
                bounds.keep_newest(revoked, REVOKED_ACCOUNTS_KEPT, by="revoked_at")
    return account


def issue_token(client_id: str, client_secret: str) -> tuple[str, int]:
    """The client-credentials grant: a short-lived platform token for a service account."""
    account = ServiceAccount.objects.filter(client_id=client_id).first()
    if account is None or not crypto.secret_matches(client_secret, account.secret_hash):
        _token_refused(client_id, "bad client credentials")
        raise Unauthenticated("Unknown client or wrong secret.")
    if account.revoked_at is not None:
        _token_refused(client_id, "revoked", account)
        raise Unauthenticated("This service account is revoked.")
    token, lifetime = platform_tokens.issue_for_service_account(account)
    ServiceAccount.objects.filter(pk=account.pk).update(last_token_at=timezone.now())
    return token, lifetime


def _token_refused(client_id: str, reason: str, account: ServiceAccount | None = None) -> None:
    """Logged each time, audited as a count per minute (decision 0031): the caller is
    unauthenticated, and a flood must not become a flood of audit rows."""
    audit.count_denied(
        "auth.token",
        reason=reason,
        target_type="serviceaccount",
        target_id=client_id,
        tenant_id=account.tenant_id if account else None,
        project_id=account.project_id if account else None,
    )


# --- password sign-in --------------------------------------------------------
# django-axes counts failed password sign-ins and refuses locked-out usernames and
# addresses (apps.tenancy.auth.passwords, decision 0039). An operator lifts a user's
# lockout here.


def sign_in_locked(username: str) -> bool:
    """Whether ``username`` has failed too often within the cool-off (whatever the address)."""
    since = timezone.now() - get_cool_off()
    recent = AccessAttempt.objects.filter(username=username, attempt_time__gte=since)
    failures = recent.aggregate(n=Sum("failures_since_start"))["n"] or 0
    return failures >= settings.AXES_FAILURE_LIMIT


def lift_sign_in_lockout(principal: Principal, user) -> None:
    """Forget the failures counted against ``user``'s username, so they can sign in again
    now: an operator's answer to "I am locked out". Failures other usernames had from the
    same addresses stay (decision 0039)."""
    AxesProxyHandler.reset_attempts(username=user.get_username())
    audit.record(principal, "user.sign_in_unlock", target=user, details={"username": user.get_username()})


# --- audit -------------------------------------------------------------------


def list_audit_events(principal: Principal) -> QuerySet[AuditEvent]:
    """The audit events ``principal`` may read (tenant admins: their tenants); the API and
    the portal narrow them with ``apps.tenancy.filters.AuditEventFilter``."""
    policy.require_somewhere(principal, Perm.AUDIT_VIEW)
    return policy.restrict(AuditEvent.objects.all(), principal, Perm.AUDIT_VIEW)


def tenants_waiting_for_onboarding(limit: int = 200) -> list:
    return list(Tenant.objects.filter(status=Tenant.Status.ONBOARDING).values_list("pk", flat=True)[:limit])
