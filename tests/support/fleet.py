"""Nodes, allocations written directly, and simulated hardware faults."""

from __future__ import annotations

from apps.allocations.models import Allocation, Node
from apps.core.models import SimulatedFault
from tests.factories import AllocationFactory, NodeFactory


def make_nodes(flavor, count: int, prefix: str = "gpu") -> list[Node]:
    """``count`` schedulable nodes of ``flavor``, cabled to leaf LEAF1 (the network steps need it)."""
    return [
        NodeFactory(
            hostname=f"{prefix}-{flavor.name}-{i:03d}",
            flavor=flavor,
            ib_guid=f"0x{i:016x}",
            switch_serial="LEAF1",
            switch_port=f"Eth1/{i}",
        )
        for i in range(count)
    ]


def made_allocation(
    project, node, flavor, activated, finished=None, state=Allocation.State.RELEASED
) -> Allocation:
    """An allocation written directly, with the active time usage is measured from."""
    return AllocationFactory(
        node=node,
        project=project,
        flavor=flavor,
        state=state,
        activated_at=activated,
        finished_at=finished,
    )


def fault(system: str, operation: str, **kwargs) -> SimulatedFault:
    """The simulated ``system`` fails ``operation`` (see SimulatedFault for the knobs)."""
    return SimulatedFault.objects.create(system=system, operation=operation, **kwargs)
