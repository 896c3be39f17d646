"""Side effects of runtime changes: the instance timeline, live updates to open
pages, waking a node's agent, and the exposure-mode decision. The messages go
after commit (``broadcast.after_commit``)."""

from __future__ import annotations

from apps.core.broadcast import after_commit
from apps.runtime import history
from apps.runtime.models import InstanceEvent


def project_group(project_id) -> str:
    return f"instances.project.{project_id}"


def agent_group(node_id) -> str:
    return f"agent.node.{node_id}"


def record(
    instance, kind: str, message: str, *, from_state: str = "", to_state: str = "", actor: str = ""
) -> None:
    InstanceEvent.objects.create(
        instance=instance,
        kind=kind,
        message=message[:2000],
        from_state=from_state,
        to_state=to_state,
        actor=actor,
    )
    history.event_written(instance)
    project_id, instance_id, state = instance.project_id, str(instance.pk), to_state or instance.state
    after_commit(
        project_group(project_id),
        {
            "type": "instance.update",
            "instance_id": instance_id,
            "state": state,
            "message": message[:300],
        },
    )


def wake_agent(node_id) -> None:
    """A long-polling agent of this node returns at once instead of at its timeout."""
    after_commit(agent_group(node_id), {"type": "agent.wake"})


def logs_group(instance_id) -> str:
    return f"instances.logs.{instance_id}"


def logs_appended(instance_id, newest: int) -> None:
    """Open Logs tabs of the instance fetch what is new: the message carries the newest
    line's id, never a line (the tab reads them through the view that checks who sees)."""
    message = {"type": "instance.logs", "instance_id": str(instance_id), "newest": newest}
    after_commit(logs_group(instance_id), message)
