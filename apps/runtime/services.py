"""App instance operations: who sees what, launch, stop, start, decommission, share.

Instance state moves only through ``states.transition``; the node agent's side
(claiming tasks, reporting results, heartbeats) is in ``apps.runtime.agents``.
The API, the portal and the admin go through these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.access import selectors as access
from apps.allocations.models import Allocation, Node
from apps.catalog import manifests
from apps.catalog import services as catalog
from apps.catalog.models import App, AppVersion
from apps.core import audit, crypto, secrets
from apps.core.errors import Conflict, InvalidState, NotFound, RateLimited, ValidationFailed
from apps.runtime import capacity, events, history, rendering, signals
from apps.runtime.models import (
    AgentTask,
    AppInstance,
    Endpoint,
    InstanceEvent,
    InstanceLogLine,
    InstanceMember,
    Operation,
    RuntimeSecret,
)
from apps.runtime.selectors import deleted_by_release, visible_instances
from apps.runtime.states import transition
from apps.tenancy import policy, quotas
from apps.tenancy import services as tenancy
from apps.tenancy.models import Project, Tenant
from apps.tenancy.principal import Grant, Principal, for_user
from apps.tenancy.roles import Perm, Role

State = AppInstance.State
VIEW_PERM = "view_appinstance"


# --- who sees what -------------------------------------------------------------


def get_instance(principal: Principal, project_id, instance_id) -> AppInstance:
    """An instance the caller may see (404 otherwise). Someone it was shared with by
    name may reach it without any role in its project."""
    instance = (
        visible_instances(principal)
        .filter(project_id=project_id, pk=instance_id)
        .select_related("app", "app_version", "allocation__node")
        .first()
    )
    if instance is None:
        policy.record_out_of_scope(
            principal, AppInstance, instance_id, AppInstance.objects.filter(pk=instance_id)
        )
        raise NotFound()
    return instance


def may_manage(principal: Principal, instance: AppInstance) -> bool:
    """Owners manage their own instances while they may view the project's instances;
    project and tenant admins manage all of them."""
    scope = instance.tenant_id, instance.project_id
    owns = principal.user is not None and instance.owner_id == principal.user.pk
    return (owns and principal.can(Perm.INSTANCE_VIEW, *scope)) or principal.can(Perm.INSTANCE_MANAGE, *scope)


# --- launch ---------------------------------------------------------------------


def _version(app: App, version: str | None) -> AppVersion:
    versions = app.versions.filter(status=AppVersion.Status.PUBLISHED)
    found = (
        versions.filter(version=version).first() if version else versions.order_by("-published_at").first()
    )
    if found is None:
        raise ValidationFailed(
            details={"version": [f"{app.slug} has no published version {version or ''}".strip()]}
        )
    return found


def _placement(project: Project, allocation_id) -> Allocation:
    allocation = (
        Allocation.objects.select_related("node", "flavor").filter(pk=allocation_id, project=project).first()
    )
    if allocation is None:
        raise ValidationFailed(details={"allocation_id": ["Not an allocation of this project."]})
    if allocation.state != Allocation.State.ACTIVE:
        raise InvalidState(f"The allocation is {allocation.state}; apps run on ACTIVE allocations.")
    if not allocation.node.credential_hash:
        # Nothing would ever pick the task up: say so now rather than stay "requested".
        raise InvalidState(f"No node agent has enrolled on {allocation.node.hostname}; apps need one to run.")
    return allocation


def _check_resources(manifest: dict, parameters: dict, allocation: Allocation) -> None:
    needs = {**manifest["resources"], "gpus": manifests.gpu_count(manifest["resources"]["gpus"], parameters)}
    flavor = allocation.flavor
    free = capacity.free_gpus(allocation)
    problems = []
    if needs["gpus"] > free:
        problems.append(
            f"needs {needs['gpus']} GPU(s); {free} of {flavor.gpus_per_node} are free "
            f"on {allocation.node.hostname}"
        )
    if needs["cpu_cores"] > flavor.cpu_cores:
        problems.append(f"needs {needs['cpu_cores']} CPU cores; the node has {flavor.cpu_cores}")
    if needs["memory_gb"] > flavor.memory_gb:
        problems.append(f"needs {needs['memory_gb']} GB memory; the node has {flavor.memory_gb}")
    if problems:
        raise Conflict(
            "The allocation's node cannot fit this app: " + "; ".join(problems) + ".",
            details={"resources": problems},
        )


def _throttle(project: Project, node: Node) -> None:
    launching = AppInstance.objects.filter(state__in=AppInstance.LAUNCHING_STATES)
    if launching.filter(project=project).count() >= settings.LAUNCH_LIMIT_PER_PROJECT:
        raise RateLimited("Too many launches in progress in this project.", retry_after=10)
    if launching.filter(allocation__node=node).count() >= settings.LAUNCH_LIMIT_PER_NODE:
        raise RateLimited("Too many launches in progress on this node.", retry_after=10)


def _allocation_ids(manifest: dict, allocation_id, allocation_ids) -> list:
    """One allocation per member: exactly one for a single-node app, within the
    manifest's ``cluster`` bounds for a clustered one; the first is the primary."""
    ids = list(allocation_ids or ([allocation_id] if allocation_id else []))
    cluster = manifest.get("cluster")
    low, high = (cluster["min_members"], cluster["max_members"]) if cluster else (1, 1)
    field = "allocation_ids" if allocation_ids else "allocation_id"
    if not ids:
        raise ValidationFailed(details={"allocation_id": ["Name the allocation to run on."]})
    if len({str(i) for i in ids}) != len(ids):
        raise ValidationFailed(details={field: ["An allocation is named twice: one member per node."]})
    if not low <= len(ids) <= high:
        count = str(low) if low == high else f"{low} to {high}"
        raise ValidationFailed(
            details={field: [f"This app runs on {count} allocation(s); {len(ids)} given."]}
        )
    return ids


def launch(
    principal: Principal,
    project: Project,
    *,
    app_slug: str,
    allocation_id=None,
    allocation_ids: list | None = None,
    version: str | None = None,
    parameters: dict | None = None,
    name: str = "",
) -> Operation:
    policy.require(principal, Perm.INSTANCE_MANAGE, project)
    app = catalog.visible_apps(principal).filter(slug=app_slug).first()
    if app is None:
        raise NotFound(f"No app {app_slug!r} in your catalog.")
    catalog.require_entitled(principal, app, project)
    app_version = _version(app, version)
    manifest = app_version.manifest
    cleaned, errors = manifests.clean_parameters(manifest, parameters)
    errors.update(_missing_secrets(manifest, cleaned, project))
    if errors:
        raise ValidationFailed("Some parameters are not valid.", details={"parameters": errors})
    ids = _allocation_ids(manifest, allocation_id, allocation_ids)
    with quotas.denials_audited(principal, "instance.launch", project):
        return _launch(principal, project, app, app_version, cleaned, ids, name)


def _launch(
    principal: Principal,
    project: Project,
    app: App,
    app_version: AppVersion,
    cleaned: dict,
    ids: list,
    name: str,
) -> Operation:
    manifest = app_version.manifest
    with transaction.atomic():
        # The tenant first, then its nodes: the order allocating takes them in. Its row
        # locked, the launch and a suspension of the tenant come one after the other.
        tenancy.require_not_suspended(Tenant.objects.select_for_update().get(pk=project.tenant_id))
        quotas.enforce(project.tenant, {"app_instances": 1})
        allocations = [_placement(project, pk) for pk in ids]
        # Serializes launches per node; in one order, so two cluster launches cannot deadlock.
        list(Node.objects.select_for_update().filter(pk__in=[a.node_id for a in allocations]).order_by("pk"))
        for allocation in allocations:
            _check_resources(manifest, cleaned, allocation)
            _throttle(project, allocation.node)
        allocation = allocations[0]
        instance = AppInstance.objects.create(
            tenant_id=project.tenant_id,
            project=project,
            app=app,
            app_version=app_version,
            allocation=allocation,
            name=name or f"{app.slug}-{timezone.now():%m%d-%H%M%S}",
            owner=principal.user,
            created_by=principal.name,
            parameters=cleaned,
            gpus=manifests.gpu_count(manifest["resources"]["gpus"], cleaned),
        )
        InstanceMember.objects.bulk_create(
            InstanceMember(
                instance=instance,
                node=member.node,
                allocation=member,
                rank=rank,
                role="primary" if rank == 0 else "worker",
            )
            for rank, member in enumerate(allocations)
        )
        Endpoint.objects.bulk_create(
            Endpoint(
                instance=instance,
                name=e["name"],
                protocol=e["protocol"],
                exposure="platform_proxy" if "platform_proxy" in e["exposure_modes"] else "private",
            )
            for e in manifest["endpoints"]
        )
        signals.instance_launched.send(AppInstance, instance=instance, manifest=manifest)
        _renew_secrets(instance)
        operation = _operation(principal, instance, "launch")
        _tasks(instance, operation, AgentTask.Action.START)
        events.record(
            instance,
            "requested",
            f"{principal.name} launched {app.name} {app_version.version} on "
            + ", ".join(a.node.hostname for a in allocations),
            to_state=State.REQUESTED,
            actor=principal.name,
        )
        audit.record(
            principal,
            "instance.launch",
            target=instance,
            details={"app": app.slug, "version": app_version.version, "allocations": [str(i) for i in ids]},
        )
    return operation


def _missing_secrets(manifest: dict, cleaned: dict, project: Project) -> dict[str, list[str]]:
    """Secret parameters whose value names no secret of the project."""
    named = {name: cleaned[name] for name in manifests.secret_parameters(manifest) if cleaned.get(name)}
    if not named:
        return {}
    known = access.project_secret_names(project.pk)
    return {
        name: [f"The project has no secret named {value!r}; add it under the project's Secrets."]
        for name, value in named.items()
        if value not in known
    }


def _operation(principal: Principal, instance: AppInstance, kind: str) -> Operation:
    operation = Operation.objects.create(
        kind=kind,
        instance=instance,
        tenant_id=instance.tenant_id,
        project_id=instance.project_id,
        requested_by=principal.name,
    )
    history.operation_started(instance)
    return operation


def _renew_secrets(instance: AppInstance) -> bool:
    """Fresh values for the secrets the app takes (its token): at launch and at every
    start, so a token learned inside the app (its kernels can read it) opens nothing
    once the app runs again. False when the app takes none."""
    names = [name for name in rendering.start_spec(instance)["secrets"] if name in manifests.PLATFORM_SECRETS]
    for name in names:
        path = RuntimeSecret.path_for(instance.pk, name)
        secrets.store().write(path, crypto.new_secret())
        RuntimeSecret.objects.update_or_create(instance=instance, name=name, defaults={"secret_path": path})
    return bool(names)


def _tasks(instance: AppInstance, operation: Operation | None, action: str) -> list[AgentTask]:
    """One task per member, each on its member's node."""
    tasks = []
    for member in instance.members.select_related("node").order_by("rank"):
        spec = (
            rendering.start_spec(instance, member)
            if action == AgentTask.Action.START
            else rendering.stop_spec(instance)
        )
        tasks.append(
            AgentTask.objects.create(
                node_id=member.node_id, instance=instance, operation=operation, action=action, spec=spec
            )
        )
        events.wake_agent(member.node_id)
    return tasks


# --- lifecycle ------------------------------------------------------------------

ACTIONS = {
    # action: (states it may start from, state while in progress, agent action)
    "stop": ((State.RUNNING, State.STARTING, State.FAILED), State.STOPPING, AgentTask.Action.STOP),
    "start": ((State.STOPPED, State.FAILED), State.STARTING, AgentTask.Action.START),
    # The platform's own (``rotate_secrets``): a start over the running app, with new secrets.
    "restart": ((State.STARTING, State.RUNNING), State.STARTING, AgentTask.Action.START),
    "decommission": (
        (State.REQUESTED, State.STARTING, State.RUNNING, State.STOPPING, State.STOPPED, State.FAILED),
        State.DECOMMISSIONING,
        AgentTask.Action.REMOVE,
    ),
}


_ALREADY = {
    "stop": (State.STOPPING, State.STOPPED),
    "start": (State.STARTING, State.RUNNING),
    "restart": (),
    "decommission": (State.DECOMMISSIONING, State.DELETED),
}


def already(instance: AppInstance, action: str) -> bool:
    """Whether ``instance`` is already doing or done with ``action`` (``change`` would do nothing)."""
    return instance.state in _ALREADY[action]


def change(principal: Principal, instance: AppInstance, action: str, why: str = "") -> Operation:
    """``stop``, ``start``, ``restart`` or ``decommission`` through the agent; ``why``
    goes in the event. A start (and a restart) runs the app with new secrets."""
    if not may_manage(principal, instance):
        policy.require(principal, Perm.INSTANCE_MANAGE, instance)
    allowed, in_progress, agent_action = ACTIONS[action]
    with transaction.atomic():
        current = (
            AppInstance.objects.select_for_update()
            .select_related("allocation", "app_version", "app")
            .get(pk=instance.pk)
        )
        if current.state in _ALREADY[action]:
            # Asked again while it is happening or done: the same operation, no new work.
            return current.operations.filter(kind=action).first() or _operation(principal, current, action)
        if current.state not in allowed:
            raise InvalidState(f"Cannot {action} an instance that is {current.state}.")
        if action == "start":
            # A person's start; the platform's own restart with new secrets takes access away.
            tenancy.require_not_suspended(Tenant.objects.select_for_update().get(pk=current.tenant_id))
        if agent_action == AgentTask.Action.START and current.state not in AppInstance.ACTIVE_STATES:
            require_room_to_start(current)
        operation = _operation(principal, current, action)
        previous = current.state
        transition(
            current,
            in_progress,
            reason=why,
            actor=principal.name,
            message=why or f"{principal.name}: {action}",
        )
        AgentTask.objects.filter(instance=current, status=AgentTask.Status.PENDING).update(
            status=AgentTask.Status.FAILED, error=f"superseded by {action}", finished_at=timezone.now()
        )
        details = {"previous_state": previous}
        if agent_action == AgentTask.Action.START:
            details["secrets_renewed"] = _renew_secrets(current)
        _tasks(current, operation, agent_action)
        audit.record(principal, f"instance.{action}", target=current, details=details)
    return operation


def require_room_to_start(instance: AppInstance) -> None:
    """A stopped or failed instance gave its GPUs back (``capacity``): starting it, or
    taking it back as running, takes them again, so each member's node must have them
    free, as for a launch. The caller holds a transaction: the nodes stay locked to it."""
    members = list(instance.members.select_related("allocation__node", "allocation__flavor").order_by("rank"))
    list(Node.objects.select_for_update().filter(pk__in=[m.node_id for m in members]).order_by("pk"))
    problems = []
    for member in members:
        if member.allocation is None:
            continue  # members made before they named their allocation: nothing to count against
        free = capacity.free_gpus(member.allocation)
        if instance.gpus > free:
            problems.append(
                f"needs {instance.gpus} GPU(s); {free} of {member.allocation.flavor.gpus_per_node} "
                f"are free on {member.allocation.node.hostname}"
            )
    if problems:
        raise Conflict(
            "Other apps took the GPUs this instance gave back when it stopped: " + "; ".join(problems) + ".",
            details={"resources": problems},
        )


def share(
    principal: Principal,
    instance: AppInstance,
    *,
    with_project: bool | None = None,
    usernames: list[str] = (),
    revoke_usernames: list[str] = (),
) -> AppInstance:
    """Share with the project or named users of the same tenant (never across tenants)."""
    from guardian.shortcuts import assign_perm, remove_perm

    if not may_manage(principal, instance):
        policy.require(principal, Perm.INSTANCE_MANAGE, instance)
    users = get_user_model().objects.filter(username__in=[*usernames, *revoke_usernames])
    by_name = {user.username: user for user in users}
    errors = {}
    for username in usernames:
        user = by_name.get(username)
        if user is None or not user.memberships.filter(tenant_id=instance.tenant_id).exists():
            errors.setdefault("usernames", []).append(f"{username}: no such user in this tenant.")
    if errors:
        raise ValidationFailed(details=errors)
    losing = with_project is False or bool(revoke_usernames)
    before = access_snapshot(_may_reach(instance, revoke_usernames), [instance.pk]) if losing else None
    with transaction.atomic():
        if with_project is not None:
            AppInstance.objects.filter(pk=instance.pk).update(shared_with_project=with_project)
        for username in usernames:
            assign_perm(f"runtime.{VIEW_PERM}", by_name[username], instance)
        for username in revoke_usernames:
            if username in by_name:
                remove_perm(f"runtime.{VIEW_PERM}", by_name[username], instance)
        audit.record(
            principal,
            "instance.share",
            target=instance,
            details={
                "with_project": with_project,
                "users": list(usernames),
                "revoked": list(revoke_usernames),
            },
        )
        signals.instance_access_changed.send(AppInstance, instance=instance)
        if before is not None:
            rotate_lost_access(before, f"{principal.name} stopped sharing it")
    instance.refresh_from_db()
    return instance


def record_activity(instance_id, when) -> None:
    """Traffic through the platform proxy: the instance's last use, which idle culling reads."""
    AppInstance.objects.filter(pk=instance_id).update(last_activity_at=when)


def _may_reach(instance: AppInstance, usernames) -> list:
    """Who might open ``instance`` now: its tenant's members and whoever it is shared with."""
    from guardian.shortcuts import get_users_with_perms

    users = get_user_model().objects.filter(
        Q(memberships__tenant_id=instance.tenant_id) | Q(username__in=list(usernames))
    )
    shared = get_users_with_perms(instance, only_with_perms_in=[VIEW_PERM], with_group_users=False)
    return sorted({*users.values_list("pk", flat=True), *shared.values_list("pk", flat=True)})


# --- when access is lost --------------------------------------------------------------
#
# A member who could open an app could learn its token there (a kernel reads it from its
# own environment). The token opens nothing through the proxy, but on a node the app's
# port is the way past the proxy: the agent's firewall closes it to all but the proxy,
# and the app runs with new secrets once that person has no access any more.

_RENEWING = ("launch", "start", "restart")


@dataclass(frozen=True)
class AccessSnapshot:
    """Who could open which instances before a change (``access_snapshot``)."""

    user_ids: tuple
    instance_ids: tuple | None
    reach: frozenset  # (user id, instance id)
    taken_at: datetime


def _reach(user_ids, instance_ids) -> frozenset:
    """(user, instance) for every instance each active user may open through the proxy
    now: what ``apps.proxy.sessions.decide`` allows."""
    live = AppInstance.objects.exclude(state__in=(State.DECOMMISSIONING, State.DELETED))
    if instance_ids is not None:
        live = live.filter(pk__in=instance_ids)
    reach = set()
    for user in get_user_model().objects.filter(pk__in=user_ids, is_active=True):
        visible = visible_instances(for_user(user).as_member()).filter(pk__in=live.values("pk"))
        reach.update((user.pk, pk) for pk in visible.values_list("pk", flat=True))
    return frozenset(reach)


def access_snapshot(user_ids, instance_ids=None) -> AccessSnapshot:
    """Taken before a change that may take access away (of these users, to these
    instances or all), for ``rotate_lost_access`` to compare with afterwards."""
    user_ids = tuple(user_ids)
    instance_ids = tuple(instance_ids) if instance_ids is not None else None
    return AccessSnapshot(user_ids, instance_ids, _reach(user_ids, instance_ids), timezone.now())


def rotate_lost_access(before: AccessSnapshot, why: str) -> None:
    """Once the change commits, ``rotate_secrets`` for every instance someone of
    ``before`` could open then and cannot now. After the commit, so a change made in
    several steps (an identity provider's roles replaced at sign-in) is judged by where
    it ends, not by a step in between."""

    def rotate():
        lost = {instance_id for _, instance_id in before.reach - _reach(before.user_ids, before.instance_ids)}
        for instance in AppInstance.objects.filter(pk__in=lost):
            rotate_secrets(instance, why, since=before.taken_at)

    transaction.on_commit(rotate)


def rotate_secrets(instance: AppInstance, why: str, *, since: datetime | None = None) -> Operation | None:
    """New secrets for ``instance``, audited: a running (or starting) app restarts with
    them through a ``restart`` operation; one that is not running gets them now and
    again when it starts. Nothing when it takes no secrets, or when it has started with
    new ones since ``since``."""
    with transaction.atomic():
        current = (
            AppInstance.objects.select_for_update()
            .select_related("app", "app_version", "allocation")
            .get(pk=instance.pk)
        )
        gone = current.state in (State.DECOMMISSIONING, State.DELETED)
        if gone or not rendering.start_spec(current)["secrets"]:
            return None
        if since and current.operations.filter(kind__in=_RENEWING, created_at__gte=since).exists():
            return None
        operation = None
        if current.state in ACTIONS["restart"][0]:
            operation = change(SYSTEM, current, "restart", f"restarted with new secrets: {why}")
        else:
            _renew_secrets(current)
        audit.record(
            SYSTEM,
            "instance.secrets.rotate",
            target=current,
            details={"reason": why, "restarted": operation is not None},
        )
    return operation


def instance_events(instance: AppInstance) -> QuerySet[InstanceEvent]:
    return instance.events.all()


def instance_logs(
    instance: AppInstance, *, after: int | None = None, tail: int | None = None
) -> QuerySet[InstanceLogLine]:
    """The instance's kept output, oldest first: the lines after the id ``after`` (a
    tab following the log), and of those the newest ``tail`` only."""
    lines = instance.log_lines.order_by("id")
    if after is not None:
        lines = lines.filter(id__gt=after)
    if tail is not None:
        first = lines.order_by("-id").values_list("id", flat=True)[tail - 1 : tail]
        if first:
            lines = lines.filter(id__gte=first[0])
    return lines


SYSTEM = Principal(kind="system", key="system:platform", name="platform", grants=[Grant(Role.PLATFORM_ADMIN)])


def drain_allocation(allocation: Allocation) -> int:
    """Release's drain step: decommission the allocation's instances through the
    agent; returns how many are still going. A node without an enrolled agent
    runs nothing, so its instances are simply marked deleted. Each instance's
    timeline says which release deleted it, and whose."""
    who = f" by {allocation.released_by}" if allocation.released_by else ""
    why = f"deleted because allocation {allocation.node.hostname} was released{who}"
    remaining = 0
    for instance in deleted_by_release(allocation):
        if not allocation.node.credential_hash:
            transition(instance, State.DELETED, reason=why, message=why)
            continue
        if instance.state != State.DECOMMISSIONING:
            change(SYSTEM, instance, "decommission", why)
        remaining += 1
    return remaining
