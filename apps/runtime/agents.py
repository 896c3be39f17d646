"""The node agent's side of the runtime: claiming tasks, fetching a task's secrets,
reporting results and heartbeats, and the beat tasks that notice silent agents and
claims never reported. A clustered instance moves when all its members have."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from apps.access import selectors as access
from apps.allocations import nodes
from apps.allocations.models import Allocation, Node
from apps.catalog import manifests
from apps.core import audit, secrets
from apps.core.errors import Conflict, Forbidden, NotFound
from apps.runtime import events, services
from apps.runtime.models import (
    AgentTask,
    AppInstance,
    Endpoint,
    InstanceLogLine,
    InstanceMember,
    Operation,
    RuntimeSecret,
)
from apps.runtime.states import all_members_in, member_failed, set_member_state, transition

logger = logging.getLogger(__name__)
State = AppInstance.State
# The newest lines of output kept per instance, what the Logs tab and its download offer.
LOG_LINES_KEPT = 10_000


def claim_tasks(node: Node, limit: int = 10) -> list[AgentTask]:
    """Hand the node's pending tasks to its agent (each to one caller only).

    A node's agent asks only when it holds no task: it reports each task it was given
    before it asks again. A task of the node still claimed when it asks is one the
    agent lost (killed while running it, or gone before the answer carrying it arrived),
    and is handed again (decision 0066). It keeps its first claim's time, so
    ``expire_stale_claims`` still ends a task that no agent ever finishes.
    """
    with transaction.atomic():
        tasks = list(
            AgentTask.objects.select_for_update(skip_locked=True)
            .filter(node=node, status__in=(AgentTask.Status.PENDING, AgentTask.Status.CLAIMED))
            .order_by("created_at")[:limit]
        )
        if not tasks:
            return []
        lost = [task.pk for task in tasks if task.status == AgentTask.Status.CLAIMED]
        if lost:
            logger.warning(
                "node %s: its agent lost %d claimed task(s); handed again", node.hostname, len(lost)
            )
        AgentTask.objects.filter(pk__in=[t.pk for t in tasks], status=AgentTask.Status.PENDING).update(
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
                set_member_state(instance, node, State.STARTING)
            if task.action == AgentTask.Action.START and instance.state == State.REQUESTED:
                transition(
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
    values = {
        s.name: secrets.store().read(s.secret_path)
        for s in RuntimeSecret.objects.filter(instance_id=task.instance_id)
    }
    instance = AppInstance.objects.select_related("app_version").get(pk=task.instance_id)
    for name in manifests.secret_parameters(instance.manifest):
        chosen = instance.parameters.get(name)
        value = access.project_secret_value(instance.project_id, chosen) if chosen else ""
        if value is None:
            raise Conflict(
                f"The project secret {chosen!r} this app takes as {name} was removed; add it again."
            )
        values[name] = value
    return values


_DONE_STATE = {
    AgentTask.Action.START: State.RUNNING,
    AgentTask.Action.STOP: State.STOPPED,
    AgentTask.Action.REMOVE: State.DELETED,
}


def report_task(
    node: Node, task_id, *, succeeded: bool, error: str = "", endpoints: list[dict] = ()
) -> AgentTask:
    """The agent's result for a task: endpoints on start, the failure reason otherwise.

    A start whose endpoints name a host other than the node's own address (see
    ``nodes.serves_at``) fails, is audited, and raises ``Forbidden`` once that is
    committed: the node's root user controls the agent, and the proxy would connect there.
    """
    now = timezone.now()
    refused: list[dict] = []
    with transaction.atomic():
        task = AgentTask.objects.select_for_update().filter(pk=task_id, node=node).first()
        if task is None:
            raise NotFound("No such task for this node.")
        if task.status != AgentTask.Status.CLAIMED:
            return task  # a repeated report changes nothing
        if succeeded and task.action == AgentTask.Action.START:
            refused = [item for item in endpoints if not nodes.serves_at(node, item["host"])]
        if refused:
            succeeded, error = False, _refusal(node, refused)
        task.status = AgentTask.Status.SUCCEEDED if succeeded else AgentTask.Status.FAILED
        task.error, task.finished_at = error[:2000], now
        task.save(update_fields=["status", "error", "finished_at", "updated_at"])
        instance = AppInstance.objects.select_for_update().get(pk=task.instance_id)
        actor = f"agent:{node.hostname}"
        if _superseded(task):
            # A restart with new secrets follows on this node and replaces what this start
            # ran: the restart's report moves the instance, and its endpoints are the ones.
            pass
        elif succeeded:
            _task_done(task, instance, node, endpoints, now=now, actor=actor)
        else:
            reason = error[:500] or f"{task.action} failed on {node.hostname}"
            member_failed(
                instance, node, reason, actor=actor, kind="endpoint_refused" if refused else "state"
            )
        if task.operation_id:
            _operation_progress(task.operation_id, failed=not succeeded, error=error, now=now)
        if refused:
            audit.record(
                nodes.agent_principal(node),
                "agent.endpoint_refused",
                target=instance,
                outcome=audit.DENIED,
                details={"node": node.hostname, "agent_address": node.agent_address, "endpoints": refused},
            )
    if refused:
        raise Forbidden(error, details={"endpoints": refused})
    return task


def _task_done(task: AgentTask, instance: AppInstance, node: Node, endpoints, *, now, actor: str) -> None:
    """A task succeeded on this node: its member moves, and the instance once all its members have."""
    done = _DONE_STATE[task.action]
    if task.action == AgentTask.Action.START:
        member = InstanceMember.objects.filter(instance=instance, node=node).first()
        if member is None or member.rank == 0:
            for item in endpoints:  # the primary serves the instance's endpoints
                Endpoint.objects.filter(instance=instance, name=item["name"]).update(
                    host=item["host"], port=item["port"], reported_at=now
                )
    set_member_state(instance, node, done)
    in_step = task.action != AgentTask.Action.START or instance.state == State.STARTING
    if in_step and all_members_in(instance, done):
        if task.action == AgentTask.Action.REMOVE:
            Endpoint.objects.filter(instance=instance).update(host="", port=None, reported_at=now)
            RuntimeSecret.objects.filter(instance=instance).delete()
        transition(instance, done, actor=actor)


def _superseded(task: AgentTask) -> bool:
    return task.action == AgentTask.Action.START and (
        AgentTask.objects.filter(
            node_id=task.node_id,
            instance_id=task.instance_id,
            action=AgentTask.Action.START,
            created_at__gt=task.created_at,
        ).exists()
    )


def _refusal(node: Node, refused: list[dict]) -> str:
    named = ", ".join(f"{item['name']} at {item['host']}" for item in refused)
    own = node.agent_address or "none recorded: enroll its agent again"
    return (
        f"refused: the agent on {node.hostname} reported {named}, not the node's own address ({own}); "
        "the platform proxy connects to a node's apps only there"
    )


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
        member_failed(instance, node, reason, actor=actor, kind="exited")
    if was_offline:
        for instance in on_node.filter(state=State.FAILED, pk__in=running):
            _take_back(instance, node, actor)


def _take_back(instance: AppInstance, node: Node, actor: str) -> None:
    """An instance its agent still runs after a silence comes back as running, unless
    the GPUs it gave back when it failed were taken by another launch meanwhile: then
    its workload is stopped, as it would share GPUs the platform counts as another's."""
    with transaction.atomic():
        try:
            services.require_room_to_start(instance)
        except Conflict as exc:
            services.change(
                services.SYSTEM, instance, "stop", f"the agent on {node.hostname} is back, but {exc.message}"
            )
            return
        set_member_state(instance, node, State.RUNNING)
        if all_members_in(instance, State.RUNNING):
            transition(
                instance,
                State.RUNNING,
                actor=actor,
                kind="node_online",
                message=f"the agent on {node.hostname} is back and still runs it",
            )


# Beat runs the silence sweep every 15 s; a longer gap since its last run means the
# platform itself was down (its database, Redis or worker) and heard no agent either.
SWEEP_GAP_SECONDS = 20
_SWEPT_KEY, _LISTENING_KEY = "runtime:silence-swept-at", "runtime:listening-since"


def _listening_since(now):
    """Since when the platform has been hearing agents without a break, as far as the
    sweep knows (its own runs, kept in the cache: Redis restarted empty counts as a break)."""
    known = cache.get_many([_SWEPT_KEY, _LISTENING_KEY])
    swept, since = known.get(_SWEPT_KEY), known.get(_LISTENING_KEY)
    if swept is None or since is None or (now - swept).total_seconds() > SWEEP_GAP_SECONDS:
        since = now
    cache.set_many({_SWEPT_KEY: now, _LISTENING_KEY: since}, timeout=None)
    return since


def mark_silent_nodes_offline(now=None) -> int:
    """Beat: nodes whose agent stopped heartbeating go offline; their instances show it.
    Silence counts only while the platform was listening: after its own outage every
    agent gets the whole ``AGENT_OFFLINE_AFTER_SECONDS`` to reach it again (their
    retries back off up to 30 s), rather than be taken for dead on its return."""
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
    if _listening_since(now) > cutoff:
        return 0
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
                member_failed(instance, node, reason, kind="node_offline")
            audit.record(
                None, "node.agent_offline", target=node, outcome=audit.FAILURE, details={"reason": reason}
            )
    return len(silent)


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


def append_logs(node: Node, instance_id, lines: list[str], *, dropped: int = 0) -> int:
    """Lines of output the node's agent read from one of its workloads, oldest first;
    ``dropped``: lines it had to skip before them (a marker line says so). Only the
    newest ``LOG_LINES_KEPT`` of the instance stay. Returns the id of the newest line.

    Only a member node's agent may write an instance's log, and only while that member's
    allocation lives (404 otherwise): the node keeps its identity from one tenant to the
    next, and its next tenant, root on it, must not write into the logs its earlier
    tenants still read. The API bounds the lines and the batch."""
    instance = (
        AppInstance.objects.filter(
            pk=instance_id, members__node=node, members__allocation__state__in=Allocation.LIVE_STATES
        )
        .only("pk")
        .first()
    )
    if instance is None:
        raise NotFound("No such instance on this node.")
    rows = [InstanceLogLine(instance=instance, dropped=dropped)] if dropped else []
    rows += [InstanceLogLine(instance=instance, text=line) for line in lines]
    if not rows:
        return 0
    with transaction.atomic():
        created = InstanceLogLine.objects.bulk_create(rows)
        # Ids grow, so the newest lines are the highest ids: everything below the
        # LOG_LINES_KEPT-th newest goes (an index range scan on (instance, id)).
        oldest_kept = (
            InstanceLogLine.objects.filter(instance=instance)
            .order_by("-id")
            .values_list("id", flat=True)[LOG_LINES_KEPT - 1 : LOG_LINES_KEPT]
        )
        if oldest_kept:
            InstanceLogLine.objects.filter(instance=instance, id__lt=oldest_kept[0]).delete()
        newest = created[-1].id  # PostgreSQL and SQLite both return the new ids
        events.logs_appended(instance.pk, newest)
    return newest
