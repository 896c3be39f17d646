"""An ACTIVE allocation made directly, for the browser tests: provisioning through the
pipeline would broadcast from the test thread, where Playwright's event loop forbids it."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.allocations.models import Allocation, Node
from tests.factories import AllocationFactory, FlavorFactory, NodeFactory, ProjectFactory, TenantFactory
from tests.support.members import member


def active_allocation_on(project, hostname: str, requested_by: str, *, enrolled: bool) -> Allocation:
    """``enrolled``: an agent counts as enrolled from this machine a day ago (the test
    plays its part); otherwise a real agent enrolls for the node."""
    agent = (
        {
            "credential_hash": "0" * 64,
            "agent_address": "127.0.0.1",
            "enrolled_at": timezone.now() - timedelta(days=1),
        }
        if enrolled
        else {}
    )
    node = NodeFactory(
        hostname=hostname, flavor=FlavorFactory(name="h100-8x"), state=Node.State.ALLOCATED, **agent
    )
    return AllocationFactory(node=node, project=project, requested_by=requested_by)


def alices_allocation(*, enrolled: bool):
    """Alice, project admin of Acme's project Training, and its ACTIVE allocation of
    gpu-000 (``enrolled`` as for ``active_allocation_on``): the allocation and Alice."""
    tenant = TenantFactory(tenant_id="acme", name="Acme")
    project = ProjectFactory(tenant=tenant, project_id="training", name="Training")
    allocation = active_allocation_on(project, "gpu-000", "alice", enrolled=enrolled)
    return allocation, member("project_admin", project=project, username="alice")
