"""An ACTIVE allocation made directly, for the browser tests: provisioning through the
pipeline would broadcast from the test thread, where Playwright's event loop forbids it."""

from __future__ import annotations

from apps.allocations.models import Allocation, Node
from apps.catalog.models import Flavor


def active_allocation_on(project, hostname: str, requested_by: str, *, enrolled: bool) -> Allocation:
    """``enrolled``: an agent counts as enrolled from this machine (the test plays its
    part); otherwise a real agent enrolls for the node."""
    flavor = Flavor.objects.create(
        name="h100-8x", gpu_model="H100", gpus_per_node=8, cpu_cores=112, memory_gb=2048
    )
    agent = {"credential_hash": "0" * 64, "agent_address": "127.0.0.1"} if enrolled else {}
    node = Node.objects.create(
        hostname=hostname, flavor=flavor, state=Node.State.ALLOCATED, approved=True, **agent
    )
    return Allocation.objects.create(
        node=node,
        tenant=project.tenant,
        project=project,
        flavor=flavor,
        gpus=8,
        os_image="ubuntu-22.04",
        requested_by=requested_by,
        state=Allocation.State.ACTIVE,
        progress=100,
    )
