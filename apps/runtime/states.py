"""How an instance and its members change state: a conditional UPDATE on the state
read (so two movers cannot both win), an event for every move, and the proxy's
routes following (``signals.instance_moved``). Everything that moves an instance
goes through ``transition``."""

from __future__ import annotations

from django.utils import timezone

from apps.allocations.models import Node
from apps.runtime import events, history, signals
from apps.runtime.models import AppInstance, InstanceMember


def transition(
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
    own news, already written with ``set_member_state``)."""
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
        signals.instance_moved.send(AppInstance, instance=instance)
        if new_state == AppInstance.State.DELETED:
            history.instance_deleted(instance)
    return bool(changed)


def set_member_state(instance: AppInstance, node: Node, state: str, reason: str = "") -> None:
    InstanceMember.objects.filter(instance=instance, node=node).update(
        state=state, state_reason=reason, last_report_at=timezone.now()
    )


def all_members_in(instance: AppInstance, state: str) -> bool:
    return not instance.members.exclude(state=state).exists()


def member_failed(
    instance: AppInstance, node: Node, reason: str, *, actor: str = "", kind: str = "state"
) -> None:
    """One member failed, so the instance has: a clustered instance's reason says
    which member it is about."""
    set_member_state(instance, node, AppInstance.State.FAILED, reason)
    if instance.members.count() > 1:
        reason = f"{node.hostname}: {reason}"
    transition(instance, AppInstance.State.FAILED, reason=reason, actor=actor, kind=kind, members=False)
