"""What happens around an allocation's state change: audit, the CCP webhook
outbox row (in the same transaction), and the live update to open pages; and
the hint that an allocation's telemetry has new points, on the same socket."""

from __future__ import annotations

from django.db import transaction

from apps.allocations import signals
from apps.core import audit
from apps.core.broadcast import group_send

WEBHOOK_STATES = {"ACTIVE", "FAILED", "RELEASED"}


def project_group(project_id) -> str:
    return f"allocations.project.{project_id}"


def state_changed(allocation, previous: str) -> None:
    audit.record(
        None,
        f"allocation.{allocation.state.lower()}",
        target=allocation,
        outcome=audit.FAILURE if allocation.state == "FAILED" else audit.SUCCESS,
        details={
            "previous_state": previous,
            "node": str(allocation.node_id),
            **({"reason": allocation.failure_reason} if allocation.failure_reason else {}),
        },
    )
    if allocation.state in WEBHOOK_STATES:
        from apps.webhooks import services as webhooks

        webhooks.enqueue_state_change(allocation, previous)
    signals.state_changed.send(sender=type(allocation), allocation=allocation, previous=previous)
    allocation_changed(allocation.pk)


def allocation_changed(allocation_id) -> None:
    """Tell open pages after commit; they re-render the row from the database. A layer
    that cannot take it is logged: the change stands (as broadcast.after_commit)."""
    transaction.on_commit(lambda: _broadcast(allocation_id), robust=True)


def _broadcast(allocation_id) -> None:
    from apps.allocations.models import Allocation, AllocationStep

    row = (
        Allocation.objects.filter(pk=allocation_id).values("project_id", "state", "step", "progress").first()
    )
    if row is None:
        return
    group_send(
        project_group(row["project_id"]),
        {
            "type": "allocation.update",
            "allocation_id": str(allocation_id),
            "state": row["state"],
            "step": row["step"],
            "step_label": AllocationStep.label_for(row["step"]),
            "progress": row["progress"],
        },
    )


def points_arrived(allocation_id, project_id) -> None:
    """Tell open pages that the allocation's GPUs have new readings. Ids only: the
    page asks the metrics service for them, which applies the caller's visibility
    (a project's socket is open to more people than may read the tenant's series)."""
    group_send(
        project_group(project_id),
        {"type": "allocation.points", "allocation_id": str(allocation_id), "event": "points"},
    )
