"""Secrets custody for projects: access credentials (SSH key pairs the platform makes)
and project secrets (values members supply for their apps). Values go to the secrets
store; the records keep names and public halves. Every change is audited.

SSH access to allocated nodes: the runtime user's authorized keys (records with an
owner, a purpose and a state the node's agent moves), what the agent reports about the
node's SSH server, the keys users keep in their profile, and clearing the keys at release.

The agent reconciles the node from the records (``desired_for_node``) and reports what
its managed block holds (``agent_report``); ``pending`` becomes ``applied`` and
``removing`` rows go away only on that report, so the state users see is the node's.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.access import keys
from apps.access.keys import fingerprint
from apps.access.models import AccessCredential, AuthorizedKey, NodeSshHost, ProjectSecret, UserSshKey
from apps.allocations.models import Allocation, Node
from apps.core import audit, bounds, secrets
from apps.core.errors import Conflict, Forbidden, InvalidState, NotFound, ValidationFailed
from apps.tenancy import policy
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership, Project, Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm, Role, permissions_of

DEFAULT_PURPOSE = "delivery to the project's app controller"
# What one project may keep: each is a row here and an entry in the secrets store.
MAX_PER_PROJECT = 100


@dataclass
class IssuedCredential:
    credential: AccessCredential
    private_key: str  # OpenSSH format; returned once, at creation


def _key_pair(comment: str) -> tuple[str, str]:
    """(private, public) in OpenSSH formats."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, f"{public.decode()} {comment}"


def create_credential(principal: Principal, project: Project, *, name: str) -> IssuedCredential:
    policy.require(principal, Perm.ACCESS_CREDENTIAL_MANAGE, project)
    tenancy.require_not_suspended(project.tenant)
    private, public = _key_pair(f"gpuaas:{project.project_id}:{name}")
    credential = AccessCredential(
        tenant_id=project.tenant_id,
        project=project,
        name=name,
        public_key=public,
        fingerprint=fingerprint(public),
        created_by=principal.name,
    )
    credential.secret_path = AccessCredential.path_for(credential.pk)
    # Into the store first: a record never names a private key that is not there. A
    # refused insert leaves an unreferenced key under a fresh id, discarded below.
    secrets.store().write(credential.secret_path, private)
    try:
        with transaction.atomic():
            _require_room(project, AccessCredential.objects.filter(project=project), "access_credentials")
            credential.save(force_insert=True)
            audit.record(
                principal,
                "access_credential.create",
                target=credential,
                details={"name": name, "fingerprint": credential.fingerprint},
            )
    except IntegrityError:
        secrets.store().delete(credential.secret_path)
        raise Conflict(f"This project already has an access credential named {name!r}.") from None
    except Conflict:
        secrets.store().delete(credential.secret_path)
        raise
    return IssuedCredential(credential, private)


def _require_room(project: Project, kept: QuerySet, resource: str) -> None:
    what = resource.replace("_", " ")
    bounds.require_room(
        project,
        kept,
        MAX_PER_PROJECT,
        resource=resource,
        message=f"A project keeps at most {MAX_PER_PROJECT} {what}; delete one first.",
    )


def deliver_credential(principal: Principal, credential: AccessCredential, *, purpose: str = "") -> dict:
    """The key pair, to a service account of the credential's project holding
    ``project_admin`` (the project's app controller): nobody else, whatever their role."""
    account = principal.service_account
    if not (
        principal.kind == "service_account"
        and account is not None
        and account.project_id == credential.project_id
        and account.role == Role.PROJECT_ADMIN
        and account.revoked_at is None
    ):
        audit.record(
            principal,
            "access_credential.deliver",
            target=credential,
            outcome=audit.DENIED,
            details={"reason": "only a project_admin service account of this project receives it"},
        )
        raise Forbidden("Only a service account of this project with role project_admin receives the key.")
    private = secrets.store().read(credential.secret_path)
    audit.record(
        principal,
        "access_credential.deliver",
        target=credential,
        details={"purpose": purpose or DEFAULT_PURPOSE, "fingerprint": credential.fingerprint},
    )
    return {"private_key": private, "public_key": credential.public_key}


def delete_credential(principal: Principal, credential: AccessCredential) -> None:
    policy.require(principal, Perm.ACCESS_CREDENTIAL_MANAGE, credential)
    with transaction.atomic():
        audit.record(
            principal,
            "access_credential.delete",
            target=credential,
            details={"name": credential.name, "fingerprint": credential.fingerprint},
        )
        credential.delete()  # its private key goes with it (``secrets.owned_by``)


def put_secret(
    principal: Principal, project: Project, *, name: str, value: str
) -> tuple[ProjectSecret, bool]:
    """Create the project's secret ``name``, or replace its value: (secret, created)."""
    policy.require(principal, Perm.SECRET_MANAGE, project)
    if len(value) > secrets.MAX_VALUE:
        raise ValidationFailed(details={"value": ["At most 64 KiB."]})
    with transaction.atomic():
        # The others than ``name``: replacing a value needs no room, a new name does.
        _require_room(project, ProjectSecret.objects.filter(project=project).exclude(name=name), "secrets")
        secret, created = ProjectSecret.objects.select_for_update().get_or_create(
            project=project,
            name=name,
            defaults={"tenant_id": project.tenant_id, "created_by": principal.name},
        )
        if created:
            secret.secret_path = ProjectSecret.path_for(secret.pk)
        secrets.store().write(secret.secret_path, value)
        secret.save()  # a replaced value moves updated_at
        audit.record(
            principal,
            "project_secret.create" if created else "project_secret.update",
            target=secret,
            details={"name": name},
        )
    return secret, created


def delete_secret(principal: Principal, secret: ProjectSecret) -> None:
    policy.require(principal, Perm.SECRET_MANAGE, secret)
    with transaction.atomic():
        audit.record(principal, "project_secret.delete", target=secret, details={"name": secret.name})
        secret.delete()


# --- Runtime users and SSH keys ------------------------------------------------------

KeyState = AuthorizedKey.State
MAX_KEYS_PER_ALLOCATION = 100
MAX_PROFILE_KEYS = 20
MAX_HOST_KEYS = 8
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# Keys go on a node while it is being set up or in use; not once its release began.
KEYED_STATES = (Allocation.State.PENDING, Allocation.State.PROVISIONING, Allocation.State.ACTIVE)


# --- who may do what ------------------------------------------------------------------


def get_allocation(principal: Principal, project_id, allocation_id) -> Allocation:
    """An allocation whose access the caller may manage: 404 outside their scope, 403
    for a role that may not manage the project's allocations (viewers included: the
    access answer is how to log in as root-capable user on the node)."""
    project = policy.get_object(Project.objects.all(), principal, Perm.PROJECT_VIEW, pk=project_id)
    policy.require(principal, Perm.ALLOCATION_MANAGE, project)
    return policy.get_object(
        Allocation.objects.filter(project=project).select_related("node", "flavor", "tenant", "project"),
        principal,
        Perm.ALLOCATION_VIEW,
        Perm.ALLOCATION_MANAGE,
        pk=allocation_id,
    )


def owns(principal: Principal, key: AuthorizedKey) -> bool:
    if principal.service_account is not None:
        return key.owner_service_account_id == principal.service_account.pk
    if principal.user is not None:
        return key.owner_user_id == principal.user.pk
    return key.owner_user_id is None and key.owner_service_account_id is None and key.owner == principal.name


def may_change(principal: Principal, key: AuthorizedKey) -> bool:
    """A service account (an app controller) changes only the records it owns; a person
    who may manage the allocation also changes the user keys of others, never a
    controller's bootstrap key (the controller would lose its way in), which only
    a platform operator may take off (a leaked key)."""
    if owns(principal, key) or (principal.kind == "user" and principal.is_platform_admin):
        return True
    return principal.kind == "user" and key.purpose == AuthorizedKey.Purpose.USER


# --- the allocation's access and keys ---------------------------------------------------


def ssh_host(allocation: Allocation) -> NodeSshHost | None:
    """What the node's current agent reported, once the allocation is active and the
    node has an address to reach. A report from before the agent last enrolled (the
    previous OS on the node, with other host keys) does not count."""
    if allocation.state != Allocation.State.ACTIVE or not allocation.node.agent_address:
        return None
    reported = NodeSshHost.objects.filter(node_id=allocation.node_id).first()
    enrolled_at = allocation.node.enrolled_at
    if reported is None or (enrolled_at and reported.reported_at < enrolled_at):
        return None
    return reported


def access_info(allocation: Allocation) -> dict:
    """How to log in: the node's address, its SSH port and login, and the host keys
    its agent reported (empty until it has)."""
    reported = ssh_host(allocation)
    host = allocation.node.agent_address if reported else None
    user = reported.user if reported else allocation.flavor.runtime_user
    host_keys = [
        {"type": line.split()[0], "public_key": line, "fingerprint": keys.fingerprint(line)}
        for line in (reported.host_keys if reported else [])
    ]
    return {
        "host": host,
        "port": reported.port if reported else None,
        "user": user,
        "ssh_command": ssh_command(user, host, reported.port) if host else None,
        "host_key_fingerprints": [item["fingerprint"] for item in host_keys],
        "host_keys": host_keys,
        "known_hosts": [known_hosts_line(host, reported.port, item["public_key"]) for item in host_keys],
    }


def ssh_command(user: str, host: str, port: int, *, extra: list[str] = ()) -> str:
    words = ["ssh", *extra]
    if port != 22:
        words += ["-p", str(port)]
    return shlex.join([*words, f"{user}@{host}"])


def tunnel_command(allocation: Allocation, endpoint_host: str, endpoint_port: int) -> str | None:
    """``ssh -N -L`` forwarding the same local port to an endpoint that listens only on
    the node (``host_local``); None until the node's SSH server has reported in."""
    reported = ssh_host(allocation)
    if reported is None:
        return None
    target = f"[{endpoint_host}]" if ":" in endpoint_host else endpoint_host
    forward = f"{endpoint_port}:{target}:{endpoint_port}"
    return ssh_command(
        reported.user, allocation.node.agent_address, reported.port, extra=["-N", "-L", forward]
    )


def known_hosts_line(host: str, port: int, public_key: str) -> str:
    address = ipaddress.ip_address(host).compressed
    name = address if port == 22 else f"[{address}]:{port}"
    return f"{name} {public_key}"


def keys_of(allocation: Allocation) -> QuerySet[AuthorizedKey]:
    return AuthorizedKey.objects.filter(allocation=allocation).select_related("allocation")


def get_key(allocation: Allocation, key_id) -> AuthorizedKey:
    key = keys_of(allocation).filter(pk=key_id).first()
    if key is None:
        raise NotFound()
    return key


def add_key(principal: Principal, allocation: Allocation, public_key: str, purpose: str) -> AuthorizedKey:
    parsed = keys.parse(public_key)
    if purpose not in AuthorizedKey.Purpose.values:
        raise ValidationFailed("Invalid purpose.", details={"purpose": ["Use user or bootstrap."]})
    tenancy.require_not_suspended(allocation.tenant)
    with transaction.atomic():
        # Locked: adds count in turn, and none slips past the start of a release.
        state = Allocation.objects.select_for_update().values_list("state", flat=True).get(pk=allocation.pk)
        if state not in KEYED_STATES:
            raise InvalidState(f"The allocation is {state}: keys go only on a live allocation.")
        live = AuthorizedKey.objects.filter(allocation=allocation, state__in=AuthorizedKey.LIVE_STATES)
        if live.filter(fingerprint=parsed.fingerprint).exists():
            raise Conflict(
                "This key is already on the allocation.", details={"fingerprint": parsed.fingerprint}
            )
        bounds.require_room(
            allocation,
            live,
            MAX_KEYS_PER_ALLOCATION,
            resource="authorized_keys",
            message=f"An allocation holds at most {MAX_KEYS_PER_ALLOCATION} keys.",
        )
        try:
            with transaction.atomic():  # SQLite has no row lock: the constraint decides there
                key = _create_key(
                    allocation, parsed, purpose, principal.name, principal.user, principal.service_account
                )
        except IntegrityError:
            raise Conflict("This key is already on the allocation.") from None
        _audit_key(principal, "authorized_key.add", key, allocation, purpose=purpose)
    return key


def _create_key(allocation, parsed: keys.PublicKey, purpose: str, owner: str, user, service_account):
    return AuthorizedKey.objects.create(
        allocation=allocation,
        public_key=parsed.public_key,
        comment=parsed.comment,
        fingerprint=parsed.fingerprint,
        purpose=purpose,
        owner=owner,
        owner_user=user,
        owner_service_account=service_account,
    )


def remove_key(principal: Principal, allocation: Allocation, key_id) -> AuthorizedKey:
    """The node drops the key within seconds; the record goes once its agent reports it gone."""
    key = get_key(allocation, key_id)
    if not may_change(principal, key):
        _audit_key(
            principal,
            "authorized_key.remove",
            key,
            allocation,
            outcome=audit.DENIED,
            reason="owned by another principal",
            owner=key.owner,
        )
        raise Forbidden("This key belongs to another principal; only its owner may remove it.")
    with transaction.atomic():
        _take_off(key, allocation.node)
        _audit_key(principal, "authorized_key.remove", key, allocation, owner=key.owner)
    return key


def _take_off(key: AuthorizedKey, node: Node) -> None:
    """The record goes at once where no agent applies keys, else once the agent reports it gone."""
    if not _agent_holds_keys(node):
        AuthorizedKey.objects.filter(pk=key.pk).delete()
    else:
        AuthorizedKey.objects.filter(pk=key.pk).update(state=KeyState.REMOVING, updated_at=timezone.now())
        key.state = KeyState.REMOVING


def revoke_unauthorized_keys(user, now: Principal) -> int:
    """After a membership or account change: the user's keys leave the allocations the
    user, who may do ``now``, may no longer manage, as the user's terminals end (a
    leaver, or a member made viewer, keeps no login on the nodes). How many."""
    lost = [
        key
        for key in _live_keys(owner_user=user)
        if not now.can(Perm.ALLOCATION_MANAGE, key.allocation.tenant_id, key.allocation.project_id)
    ]
    return _revoke(lost, "its owner may no longer manage the allocation")


def revoke_service_account_keys(account) -> int:
    """A revoked service account's keys (an app controller's way in) leave every node."""
    return _revoke(_live_keys(owner_service_account=account), "its owner was revoked")


def _live_keys(**owner) -> list[AuthorizedKey]:
    live = AuthorizedKey.objects.filter(state__in=AuthorizedKey.LIVE_STATES, **owner)
    return list(live.select_related("allocation__node"))


def _revoke(keys: list[AuthorizedKey], reason: str) -> int:
    for key in keys:
        with transaction.atomic():
            _take_off(key, key.allocation.node)
            _audit_key(None, "authorized_key.revoke", key, key.allocation, owner=key.owner, reason=reason)
    return len(keys)


def _audit_key(
    principal: Principal,
    action: str,
    key: AuthorizedKey,
    allocation: Allocation,
    *,
    outcome=audit.SUCCESS,
    **details,
) -> None:
    """A key has no tenant of its own: the event takes its allocation's scope. What was
    done names the allocation and the key's fingerprint too."""
    if outcome == audit.SUCCESS:
        details = {"allocation": str(allocation.pk), "fingerprint": key.fingerprint, **details}
    audit.record(
        principal,
        action,
        target=key,
        tenant_id=allocation.tenant_id,
        project_id=allocation.project_id,
        outcome=outcome,
        details=details,
    )


def _agent_holds_keys(node: Node) -> bool:
    """Whether an agent applies keys on the node: only then does a removal wait for it."""
    return (
        NodeSshHost.objects.filter(node=node).exists()
        and Node.objects.filter(pk=node.pk).exclude(credential_hash="").exists()
    )


# --- the node agent's side --------------------------------------------------------------


def desired_for_node(node: Node) -> dict:
    """What the node's runtime user should hold now: the keys of its live allocation;
    nothing (and no user) once the release began or when none is live; no keys while
    the allocation's tenant is suspended (its records stay, and go back on when the
    tenant is active again).

    ``reported`` false asks the agent for a report even if its side did not change
    (it sends one only when it did): the platform has none yet, or keys wait to be
    seen gone. A release's desired state empties when the allocation leaves
    KEYED_STATES, before its step marks the keys for removal: an agent that took
    them off and reported in between has nothing new to say, and the release would
    wait for a report that never comes."""
    live = Allocation.objects.filter(node=node, state__in=KEYED_STATES)
    allocation = live.select_related("flavor", "tenant").first()
    reported = (
        NodeSshHost.objects.filter(node=node).exists()
        and not AuthorizedKey.objects.filter(allocation__node=node, state=KeyState.REMOVING).exists()
    )
    if allocation is None:
        return {"user": None, "keys": [], "reported": reported}
    wanted = AuthorizedKey.objects.filter(allocation=allocation, state__in=AuthorizedKey.LIVE_STATES)
    if allocation.tenant.status == Tenant.Status.SUSPENDED:
        wanted = wanted.none()
    return {
        "user": allocation.flavor.runtime_user,
        "keys": [
            {"id": str(key.pk), "public_key": key.public_key}
            for key in wanted.order_by("created_at")[:MAX_KEYS_PER_ALLOCATION]
        ],
        "reported": reported,
    }


def agent_report(node: Node, *, user: str, port: int, host_keys: list[str], applied: list) -> None:
    """The agent's account of the node: its SSH server and which keys its block holds."""
    if not USER_NAME.match(user):
        raise ValidationFailed("Invalid user.", details={"user": ["Not a Unix user name."]})
    lines = [keys.parse(line, "host_keys").public_key for line in host_keys[:MAX_HOST_KEYS]]
    now = timezone.now()
    applied = [str(item) for item in applied]
    with transaction.atomic():
        NodeSshHost.objects.update_or_create(
            node=node, defaults={"user": user, "port": port, "host_keys": lines, "reported_at": now}
        )
        on_node = AuthorizedKey.objects.filter(allocation__node=node)
        on_node.filter(state=KeyState.PENDING, pk__in=applied).update(
            state=KeyState.APPLIED, applied_at=now, updated_at=now
        )
        on_node.filter(state=KeyState.REMOVING).exclude(pk__in=applied).delete()


# --- release ----------------------------------------------------------------------------


def revoke_for_release(allocation: Allocation) -> int:
    """Release step: every key of the allocation leaves the node before the node is
    given back. Returns how many the node's agent has yet to take out."""
    node = allocation.node
    records = AuthorizedKey.objects.filter(allocation=allocation)
    marked = records.filter(state__in=AuthorizedKey.LIVE_STATES).update(
        state=KeyState.REMOVING, updated_at=timezone.now()
    )
    if marked:
        audit.record(
            None,
            "authorized_key.revoke_all",
            target=allocation,
            details={"keys": marked, "reason": "release"},
        )
    if not _agent_holds_keys(node):
        records.delete()
        return 0
    return records.count()


# --- keys users keep in their profile ------------------------------------------------------


def require_person(principal: Principal) -> None:
    if principal.user is None:
        raise Forbidden("Only people keep SSH keys in a profile.")


def profile_keys(user) -> QuerySet[UserSshKey]:
    return UserSshKey.objects.filter(user=user)


def add_profile_key(principal: Principal, public_key: str, name: str = "") -> UserSshKey:
    require_person(principal)
    parsed = keys.parse(public_key)
    try:
        with transaction.atomic():
            bounds.require_room(
                principal.user,
                profile_keys(principal.user),
                MAX_PROFILE_KEYS,
                resource="profile_keys",
                message=f"A profile holds at most {MAX_PROFILE_KEYS} keys.",
            )
            key = UserSshKey.objects.create(
                user=principal.user,
                name=(name or parsed.comment)[:100],
                public_key=parsed.public_key,
                fingerprint=parsed.fingerprint,
            )
    except IntegrityError:
        raise Conflict("This key is already in your profile.") from None
    audit.record(principal, "ssh_key.add", target=key, details={"fingerprint": key.fingerprint})
    return key


def remove_profile_key(principal: Principal, key_id) -> None:
    """Off the profile; keys already put on allocations stay until removed there."""
    require_person(principal)
    key = profile_keys(principal.user).filter(pk=key_id).first()
    if key is None:
        raise NotFound()
    key.delete()
    audit.record(principal, "ssh_key.remove", target_type="usersshkey", target_id=str(key_id))


def seed_profile_keys(allocation: Allocation) -> int:
    """A new allocation gets the profile keys of every person who may manage the
    project's allocations, each owned by that person (they can remove it there)."""
    members = Membership.objects.filter(tenant_id=allocation.tenant_id).filter(
        Q(project_id=allocation.project_id) | Q(project__isnull=True)
    )
    user_ids = {m.user_id for m in members if Perm.ALLOCATION_MANAGE in permissions_of(m.role, m.limit)}
    users = {user.pk: user for user in get_user_model().objects.filter(pk__in=user_ids, is_active=True)}
    added = 0
    for profile_key in UserSshKey.objects.filter(user_id__in=users).order_by("created_at"):
        if added >= MAX_KEYS_PER_ALLOCATION:
            break
        user = users[profile_key.user_id]
        parsed = keys.PublicKey(profile_key.public_key, profile_key.name, profile_key.fingerprint)
        if AuthorizedKey.objects.filter(allocation=allocation, fingerprint=parsed.fingerprint).exists():
            continue  # two members keep the same key: once is enough
        _create_key(allocation, parsed, AuthorizedKey.Purpose.USER, user.get_username(), user, None)
        added += 1
    if added:
        audit.record(None, "authorized_key.seed", target=allocation, details={"keys": added})
    return added
