"""What other apps read of the allocations."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from apps.allocations.models import Allocation, Node


def quota_usage(tenant) -> dict[str, int]:
    """The GPUs and nodes the tenant's live allocations hold (``apps.tenancy.quotas``)."""
    live = Allocation.objects.filter(tenant=tenant, state__in=Allocation.LIVE_STATES).aggregate(
        gpus=Sum("gpus"), nodes=Count("id")
    )
    return {"gpus": live["gpus"] or 0, "nodes": live["nodes"] or 0}


def stuck(now: datetime | None = None) -> Q:
    """Unfinished allocations no worker is moving: an expired lease (a worker died
    mid-step), or no lease and a wake-up long past (the delayed task was lost).

    The reconciler resumes these (``services.reconcile_stuck``); the operations page
    counts them, so one that stays here is one the reconciler cannot move.
    """
    now = now or timezone.now()
    grace = timedelta(seconds=max(30.0, settings.PIPELINE_POLL_SECONDS * 5))
    compensating = Q(state=Allocation.State.FAILED, compensating=True)
    unfinished = Q(state__in=Allocation.IN_FLIGHT_STATES) | compensating
    overdue = (
        Q(lease_until__lt=now)
        | Q(lease_until__isnull=True, next_check_at__lt=now - grace)
        | Q(lease_until__isnull=True, next_check_at__isnull=True, updated_at__lt=now - grace)
    )
    return unfinished & overdue


def nodes_by_flavor_and_state() -> list[dict]:
    """``flavor_id``, ``flavor`` (its name), ``state`` and ``count`` of every non-empty
    pair, in one grouped query whatever the size of the fleet."""
    return list(
        Node.objects.values("flavor_id", "state")
        .annotate(flavor=F("flavor__name"), count=Count("id"))
        .order_by("flavor", "state")
    )


def agents_offline() -> int:
    """Enrolled nodes whose agent stopped heartbeating (``runtime.agents`` marks them)."""
    return Node.objects.filter(agent_offline=True).count()


def troubled_allocations(now: datetime | None = None) -> dict[str, int]:
    """How many allocations failed, and how many are stuck (see ``stuck``), in one query."""
    return Allocation.objects.aggregate(
        failed=Count("id", filter=Q(state=Allocation.State.FAILED)),
        stuck=Count("id", filter=stuck(now)),
    )
