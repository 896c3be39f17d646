"""What the platform's apps hold of an allocation's node: the one rule for the GPUs
free on an allocation, which ``services.launch`` enforces and the launch page shows.

An instance holds its ``gpus`` on every member's allocation from the moment it is
requested until it is stopped, deleted or failed (``AppInstance.ACTIVE_STATES``).
"""

from __future__ import annotations

from django.db.models import F, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Greatest

from apps.allocations.models import Allocation
from apps.runtime.models import AppInstance, InstanceMember


def with_free_gpus(allocations: QuerySet[Allocation]) -> QuerySet[Allocation]:
    """``allocations`` with ``used_gpus`` and ``free_gpus`` (never below zero), in the same query."""
    held = (
        InstanceMember.objects.filter(
            allocation=OuterRef("pk"), instance__state__in=AppInstance.ACTIVE_STATES
        )
        .order_by()
        .values("allocation")
        .annotate(n=Sum("instance__gpus"))
        .values("n")
    )
    return allocations.annotate(
        used_gpus=Coalesce(Subquery(held, output_field=IntegerField()), Value(0))
    ).annotate(free_gpus=Greatest(F("flavor__gpus_per_node") - F("used_gpus"), Value(0)))


def free_gpus(allocation: Allocation) -> int:
    """The GPUs free on ``allocation`` now; a launch reads it under the node's lock."""
    return (
        with_free_gpus(Allocation.objects.filter(pk=allocation.pk)).values_list("free_gpus", flat=True).get()
    )
