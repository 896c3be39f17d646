"""What other apps read of the allocations."""

from __future__ import annotations

from django.db.models import Count, Sum

from apps.allocations.models import Allocation


def quota_usage(tenant) -> dict[str, int]:
    """The GPUs and nodes the tenant's live allocations hold (``apps.tenancy.quotas``)."""
    live = Allocation.objects.filter(tenant=tenant, state__in=Allocation.LIVE_STATES).aggregate(
        gpus=Sum("gpus"), nodes=Count("id")
    )
    return {"gpus": live["gpus"] or 0, "nodes": live["nodes"] or 0}
