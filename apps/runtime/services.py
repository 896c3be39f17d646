"""App instance operations (launch, stop, start, decommission, share) and the
node agent's side of them (claiming tasks, reporting results, heartbeats).

Instance state moves only through ``_transition`` (a conditional UPDATE on the
state it read), and every move writes an event; the API, the portal, the admin
and the agent API all go through these functions.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone

from apps.allocations.models import Allocation, Node
from apps.catalog import manifests
from apps.catalog import services as catalog
from apps.catalog.models import App, AppVersion
from apps.core import audit, crypto
from apps.core.errors import Conflict, InvalidState, NotFound, RateLimited, ValidationFailed
from apps.proxy import exposure
from apps.proxy import routes as proxy_routes
from apps.proxy import sessions as proxy_sessions
from apps.runtime import events, rendering
from apps.runtime.models import (
    AgentTask,
    AppInstance,
    Endpoint,
    InstanceEvent,
    InstanceMember,
    Operation,
    RuntimeSecret,
)
from apps.tenancy import policy
from apps.tenancy.models import Project
from apps.tenancy.principal import Grant, Principal
from apps.tenancy.roles import Perm, Role

State = AppInstance.State
VIEW_PERM = "view_appinstance"


# --- who sees what -------------------------------------------------------------


def visible_instances(principal: Principal) -> QuerySet[AppInstance]:
    """The one scope for instances: admins see every instance in their scope; others
    their own, those shared with their project, and those shared with them by name."""
    instances = AppInstance.objects.all()
    managed = policy.scope_filter(AppInstance, principal, Perm.INSTANCE_MANAGE)
    if managed is None:
        return instances
    condition = managed
    member_scope = policy.scope_filter(AppInstance, principal, Perm.INSTANCE_VIEW)
    condition |= Q(shared_with_project=True) & member_scope
    if principal.user is not None:
        condition |= Q(owner=principal.user, tenant_id__in=principal.tenant_ids())
    return instances.filter(condition)


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
    """Owners manage their own instances; project and tenant admins manage all of them."""
    owns = principal.user is not None and instance.owner_id == principal.user.pk
    return owns or principal.can(Perm.INSTANCE_MANAGE, instance.tenant_id, instance.project_id)


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
    used_gpus = (
        InstanceMember.objects.filter(
            allocation=allocation, instance__state__in=AppInstance.ACTIVE_STATES
        ).aggregate(gpus=Sum("instance__gpus"))["gpus"]
        or 0
    )
    problems = []
    if needs["gpus"] > flavor.gpus_per_node - used_gpus:
        problems.append(
            f"needs {needs['gpus']} GPU(s); {flavor.gpus_per_node - used_gpus} of "
            f"{flavor.gpus_per_node} are free on {allocation.node.hostname}"
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
    if errors:
        raise ValidationFailed("Some parameters are not valid.", details={"parameters": errors})
    ids = _allocation_ids(manifest, allocation_id, allocation_ids)
    decision = exposure.decide(manifest)
    with transaction.atomic():
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
            ui_mode=decision.mode,
            ui_mode_reason=decision.reason,
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
        proxy_routes.plan(instance, manifest, decision.route_mode)
        for secret in rendering.start_spec(instance)["secrets"]:
            RuntimeSecret.objects.create(
                instance=instance, name=secret, value_encrypted=crypto.encrypt(crypto.new_secret())
            )
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


def _operation(principal: Principal, instance: AppInstance, kind: str) -> Operation:
    return Operation.objects.create(
        kind=kind,
        instance=instance,
        tenant_id=instance.tenant_id,
        project_id=instance.project_id,
        requested_by=principal.name,
    )


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
    "decommission": (
        (State.REQUESTED, State.STARTING, State.RUNNING, State.STOPPING, State.STOPPED, State.FAILED),
        State.DECOMMISSIONING,
        AgentTask.Action.REMOVE,
    ),
}


_ALREADY = {
    "stop": (State.STOPPING, State.STOPPED),
    "start": (State.STARTING, State.RUNNING),
    "decommission": (State.DECOMMISSIONING, State.DELETED),
}


def change(principal: Principal, instance: AppInstance, action: str, why: str = "") -> Operation:
    """``stop``, ``start`` or ``decommission`` through the agent; ``why`` goes in the event."""
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
        operation = _operation(principal, current, action)
        previous = current.state
        _transition(
            current,
            in_progress,
            reason=why,
            actor=principal.name,
            message=why or f"{principal.name}: {action}",
        )
        AgentTask.objects.filter(instance=current, status=AgentTask.Status.PENDING).update(
            status=AgentTask.Status.FAILED, error=f"superseded by {action}", finished_at=timezone.now()
        )
        _tasks(current, operation, agent_action)
        audit.record(principal, f"instance.{action}", target=current, details={"previous_state": previous})
    return operation


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
        transaction.on_commit(lambda: proxy_sessions.invalidate_instance(instance.pk))
    instance.refresh_from_db()
    return instance


def _transition(
    instance: AppInstance,
    new_state: str,
    *,
    reason: str = "",
    actor: str = "",
    message: str = "",
    kind: str = "state",
    members: bool = True,
) -> bool:
    """Move the instance; its members follow unless ``members`` is false (one member's
    own news, already written with ``_member_state``)."""
    previous = instance.state
    changed = AppInstance.objects.filter(pk=instance.pk, state=previous).update(
        state=new_state, state_reason=reason, updated_at=timezone.now()
    )
    if changed:
        instance.state, instance.state_reason = new_state, reason
        if members:
            InstanceMember.objects.filter(instance=instance).update(state=new_state, state_reason=reason)
        events.record(
            instance,
            kind,
            message or reason or f"{previous} -> {new_state}",
            from_state=previous,
            to_state=new_state,
            actor=actor,
        )
        proxy_routes.sync(instance)
    return bool(changed)


def _member_state(instance: AppInstance, node: Node, state: str, reason: str = "") -> None:
    InstanceMember.objects.filter(instance=instance, node=node).update(
        state=state, state_reason=reason, last_report_at=timezone.now()
    )


def _all_members(instance: AppInstance, state: str) -> bool:
    return not instance.members.exclude(state=state).exists()


def _member_reason(instance: AppInstance, node: Node, reason: str) -> str:
    """A clustered instance's reason says which member it is about."""
    if instance.members.count() > 1:
        return f"{node.hostname}: {reason}"
    return reason


# --- the agent's side -------------------------------------------------------------


def claim_tasks(node: Node, limit: int = 10) -> list[AgentTask]:
    """Hand the node's pending tasks to its agent (each to one caller only)."""
    with transaction.atomic():
        tasks = list(
            AgentTask.objects.select_for_update(skip_locked=True)
            .filter(node=node, status=AgentTask.Status.PENDING)
            .order_by("created_at")[:limit]
        )
        if not tasks:
            return []
        AgentTask.objects.filter(pk__in=[t.pk for t in tasks]).update(
            status=AgentTask.Status.CLAIMED, claimed_at=timezone.now()
        )
        for task in tasks:
            task.status = AgentTask.Status.CLAIMED
            instance = AppInstance.objects.get(pk=task.instance_id)
            if task.operation_id:
                Operation.objects.filter(pk=task.operation_id, state=Operation.State.PENDING).update(
                    state=Operation.State.RUNNING, progress=30, updated_at=timezone.now()
                )
            if task.action == AgentTask.Action.START and instance.state in (State.REQUESTED, State.STARTING):
                _member_state(instance, node, State.STARTING)
            if task.action == AgentTask.Action.START and instance.state == State.REQUESTED:
                _transition(
                    instance,
                    State.STARTING,
                    actor=f"agent:{node.hostname}",
                    message=f"the agent on {node.hostname} is starting it",
                    members=False,
                )
    return tasks


def task_secrets(node: Node, task_id) -> dict[str, str]:
    """Secret values for a claimed start task of this node; nothing for anyone else."""
    task = AgentTask.objects.filter(
        pk=task_id, node=node, status=AgentTask.Status.CLAIMED, action=AgentTask.Action.START
    ).first()
    if task is None:
        raise NotFound("No such task for this node.")
    return {
        s.name: crypto.decrypt(s.value_encrypted)
        for s in RuntimeSecret.objects.filter(instance_id=task.instance_id)
    }


_DONE_STATE = {
    AgentTask.Action.START: State.RUNNING,
    AgentTask.Action.STOP: State.STOPPED,
    AgentTask.Action.REMOVE: State.DELETED,
}


def report_task(
    node: Node, task_id, *, succeeded: bool, error: str = "", endpoints: list[dict] = ()
) -> AgentTask:
    """The agent's result for a task: endpoints on start, the failure reason otherwise."""
    now = timezone.now()
    with transaction.atomic():
        task = AgentTask.objects.select_for_update().filter(pk=task_id, node=node).first()
        if task is None:
            raise NotFound("No such task for this node.")
        if task.status != AgentTask.Status.CLAIMED:
            return task  # a repeated report changes nothing
        task.status = AgentTask.Status.SUCCEEDED if succeeded else AgentTask.Status.FAILED
        task.error, task.finished_at = error[:2000], now
        task.save(update_fields=["status", "error", "finished_at", "updated_at"])
        instance = AppInstance.objects.select_for_update().get(pk=task.instance_id)
        member = InstanceMember.objects.filter(instance=instance, node=node).first()
        actor = f"agent:{node.hostname}"
        if succeeded:
            done = _DONE_STATE[task.action]
            if task.action == AgentTask.Action.START and (member is None or member.rank == 0):
                for item in endpoints:  # the primary serves the instance's endpoints
                    Endpoint.objects.filter(instance=instance, name=item["name"]).update(
                        host=item["host"], port=item["port"], reported_at=now
                    )
            _member_state(instance, node, done)
            in_step = task.action != AgentTask.Action.START or instance.state == State.STARTING
            if in_step and _all_members(instance, done):
                if task.action == AgentTask.Action.REMOVE:
                    Endpoint.objects.filter(instance=instance).update(host="", port=None, reported_at=now)
                    RuntimeSecret.objects.filter(instance=instance).delete()
                _transition(instance, done, actor=actor)
        else:
            reason = error[:500] or f"{task.action} failed on {node.hostname}"
            _member_state(instance, node, State.FAILED, reason)
            _transition(
                instance,
                State.FAILED,
                reason=_member_reason(instance, node, reason),
                actor=actor,
                members=False,
            )
        if task.operation_id:
            _operation_progress(task.operation_id, failed=not succeeded, error=error, now=now)
    return task


def _operation_progress(operation_id, *, failed: bool, error: str, now) -> None:
    """An operation is done when its last task is (failed at its first failure)."""
    if failed:
        Operation.objects.filter(pk=operation_id).update(
            state=Operation.State.FAILED, progress=100, error=error[:2000], finished_at=now, updated_at=now
        )
        return
    tasks = AgentTask.objects.filter(operation_id=operation_id)
    total, done = tasks.count(), tasks.filter(status=AgentTask.Status.SUCCEEDED).count()
    if done < total:
        Operation.objects.filter(pk=operation_id, state=Operation.State.RUNNING).update(
            progress=30 + 70 * done // total, updated_at=now
        )
        return
    Operation.objects.filter(pk=operation_id).exclude(state=Operation.State.FAILED).update(
        state=Operation.State.SUCCEEDED, progress=100, error="", finished_at=now, updated_at=now
    )


def heartbeat(node: Node, running: list[str] | None = None) -> None:
    """The agent is alive; ``running`` lists the instances it still runs, so
    instances marked failed while the node was silent come back."""
    now = timezone.now()
    was_offline = Node.objects.filter(pk=node.pk, agent_offline=True).exists()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now, agent_offline=False)
    if running is None:
        return
    actor = f"agent:{node.hostname}"
    on_node = AppInstance.objects.filter(members__node=node).distinct()
    for instance in on_node.filter(state=State.RUNNING).exclude(pk__in=running):
        reason = f"the workload is no longer running on {node.hostname}"
        _member_state(instance, node, State.FAILED, reason)
        _transition(
            instance,
            State.FAILED,
            reason=_member_reason(instance, node, reason),
            actor=actor,
            kind="exited",
            members=False,
        )
    if was_offline:
        for instance in on_node.filter(state=State.FAILED, pk__in=running):
            _member_state(instance, node, State.RUNNING)
            if _all_members(instance, State.RUNNING):
                _transition(
                    instance,
                    State.RUNNING,
                    actor=actor,
                    kind="node_online",
                    message=f"the agent on {node.hostname} is back and still runs it",
                )


def mark_silent_nodes_offline(now=None) -> int:
    """Beat: nodes whose agent stopped heartbeating go offline; their instances show it."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.AGENT_OFFLINE_AFTER_SECONDS)
    silent = list(
        Node.objects.filter(
            agent_offline=False,
            enrolled_at__isnull=False,
            credential_hash__gt="",
            last_heartbeat_at__lt=cutoff,
        )
    )
    for node in silent:
        with transaction.atomic():
            if not Node.objects.filter(pk=node.pk, agent_offline=False).update(agent_offline=True):
                continue
            reason = (
                f"node agent on {node.hostname} offline since {node.last_heartbeat_at:%Y-%m-%d %H:%M:%S} UTC"
            )
            for instance in AppInstance.objects.filter(
                members__node=node, state__in=AppInstance.ACTIVE_STATES
            ).distinct():
                _member_state(instance, node, State.FAILED, reason)
                _transition(
                    instance,
                    State.FAILED,
                    reason=_member_reason(instance, node, reason),
                    kind="node_offline",
                    members=False,
                )
            audit.record(
                None, "node.agent_offline", target=node, outcome=audit.FAILURE, details={"reason": reason}
            )
    return len(silent)


def runtime_secret(instance: AppInstance, name: str) -> str | None:
    """For the platform's own use (the proxy's auth bridge); never for an API answer."""
    secret = RuntimeSecret.objects.filter(instance=instance, name=name).first()
    return crypto.decrypt(secret.value_encrypted) if secret else None


def instance_events(instance: AppInstance) -> QuerySet[InstanceEvent]:
    return instance.events.all()


SYSTEM = Principal(kind="system", key="system:platform", name="platform", grants=[Grant(Role.PLATFORM_ADMIN)])


def drain_allocation(allocation: Allocation) -> int:
    """Release's drain step: decommission the allocation's instances through the
    agent; returns how many are still going. A node without an enrolled agent
    runs nothing, so its instances are simply marked deleted."""
    remaining = 0
    for instance in AppInstance.objects.filter(
        Q(allocation=allocation) | Q(members__allocation=allocation),
        state__in=[*AppInstance.ACTIVE_STATES, State.STOPPED, State.FAILED],
    ).distinct():
        if not allocation.node.credential_hash:
            _transition(instance, State.DELETED, reason="node released", message="the node was released")
            continue
        if instance.state != State.DECOMMISSIONING:
            change(SYSTEM, instance, "decommission")
        remaining += 1
    return remaining


def expire_stale_claims(now=None) -> int:
    """Beat: a task claimed by an agent that never reported (it died mid-task) fails
    with a reason, so its instance does not stay ``starting`` forever."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.AGENT_TASK_TIMEOUT_SECONDS)
    stale = list(
        AgentTask.objects.filter(status=AgentTask.Status.CLAIMED, claimed_at__lt=cutoff).select_related(
            "node"
        )
    )
    for task in stale:
        report_task(
            task.node,
            task.pk,
            succeeded=False,
            error=f"the agent on {task.node.hostname} claimed this {task.action} and never reported back",
        )
    return len(stale)
