"""Nodes, allocations written directly or asked of CCP's API, simulated hardware faults,
and a fleet in trouble."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from apps.allocations import services as allocations
from apps.allocations.models import Allocation, Node
from apps.core.models import SimulatedFault
from apps.monitoring.metrics import embedded
from apps.monitoring.models import Alert, AlertRule, XidEvent
from apps.networking import services as networking
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from apps.tenancy.models import Tenant
from apps.webhooks.models import Delivery
from tests.factories import AllocationFactory, NodeFactory


def made_ready(tenant: Tenant) -> Tenant:
    """``tenant`` with its network, storage and a roomy quota, as allocating needs."""
    networking.load_pool(prefix="vrf", count=4, first_vni=50001, first_vlan=1000)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    quotas.set_quota(tenant, {"gpus": 64, "nodes": 8, "storage_gb": 1_000_000})
    return tenant


def allocated(allocator, project, capture, *, execute: bool = True) -> Allocation:
    """One h100-8x node with Ubuntu 22.04 that ``allocator`` asks the service for in
    ``project``; ``capture`` (django_capture_on_commit_callbacks) runs its pipeline at
    commit, or with ``execute=False`` leaves it PENDING. Read back once that is done."""
    with capture(execute=execute):
        [allocation] = allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
    allocation.refresh_from_db()
    return allocation


def failed_release(allocator, project, capture) -> Allocation:
    """An allocation of ``allocator``'s whose release failed at its network step (the
    simulated switch unreachable until the test deletes the fault): FAILED, read back."""
    allocation = allocated(allocator, project, capture)
    fault("ndfc", "detach", message="switch unreachable")
    with capture(execute=True):
        allocations.release(principals.for_user(allocator), allocation)
    allocation.refresh_from_db()
    return allocation


def ccp_allocate(api, token, project, **body):
    """CCP's ``POST /api/baremetal-manager/allocate`` for ``project``: one h100-8x node
    with Ubuntu 22.04 unless ``body`` says otherwise."""
    payload = {
        "flavor": "h100-8x",
        "os_image": "ubuntu-22.04",
        "tenant_id": project.tenant.tenant_id,
        "project_id": project.project_id,
        **body,
    }
    return api.post(
        "/api/baremetal-manager/allocate", payload, format="json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def ccp_release(api, token, node_id):
    """CCP's ``POST /api/baremetal-manager/{node_id}/release``, draining the node first."""
    return api.post(
        f"/api/baremetal-manager/{node_id}/release",
        {"drain": True},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


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
    """An allocation written directly, with the active time usage is measured from.
    Its tenant is back-dated to have been onboarded by then, as a real tenant exists
    before its usage (months over before onboarding are billed empty, unrecorded)."""
    tenant = project.tenant
    if activated is not None and tenant.created_at > activated:
        tenant.created_at = activated
        Tenant.objects.filter(pk=tenant.pk).update(created_at=activated)
    return AllocationFactory(
        node=node,
        project=project,
        flavor=flavor,
        state=state,
        activated_at=activated,
        finished_at=finished,
    )


def allocation_on(project, node, state=Allocation.State.ACTIVE) -> Allocation:
    """An allocation of ``node`` to ``project`` written directly, with no pipeline behind it."""
    return AllocationFactory(node=node, project=project, requested_by="someone", state=state)


def fault(system: str, operation: str, **kwargs) -> SimulatedFault:
    """The simulated ``system`` fails ``operation`` (see SimulatedFault for the knobs)."""
    return SimulatedFault.objects.create(system=system, operation=operation, **kwargs)


def troubled_fleet(flavors, per_state: int = 1) -> dict:
    """A fleet an operator has work on: ``per_state`` nodes of each flavor in each
    node state (one of each flavor's with an offline agent), a failed and a stuck
    allocation per flavor, a dead letter and a firing alert per flavor, an open XID
    event and a temperature reading for every node's GPU 0. Returns the nodes."""
    now = timezone.now()
    rule, _ = AlertRule.objects.get_or_create(
        name="gpu_temperature_critical",
        defaults={"metric": "gpu_temperature", "severity": "critical", "threshold": 90, "for_seconds": 120},
    )
    found = []
    for flavor in flavors:
        for state in Node.State:
            made = make_nodes(flavor, per_state, prefix=f"{state}-{len(found)}")
            Node.objects.filter(pk__in=[node.pk for node in made]).update(state=state)
            found += made
        Node.objects.filter(pk=found[-1].pk).update(agent_offline=True)
        failed = AllocationFactory(node=NodeFactory(flavor=flavor), state=Allocation.State.FAILED)
        AllocationFactory(
            node=NodeFactory(flavor=flavor),
            project=failed.project,
            state=Allocation.State.PROVISIONING,
            lease_until=now - timedelta(minutes=5),
        )
        Delivery.objects.create(
            event_type="allocation.state_changed",
            url="https://ccp.example/hooks",
            body="{}",
            correlation_id="c",
            status=Delivery.Status.DEAD,
            attempts=6,
        )
        Alert.objects.create(
            rule=rule,
            subject=f"node:{found[-1].pk}:gpu:0",
            state=Alert.State.FIRING,
            severity="critical",
            node=found[-1],
            hostname=found[-1].hostname,
            gpu=0,
            value=95,
            threshold=90,
            summary="GPU temperature > 90 C",
            pending_since=now,
            last_breach_at=now,
            started_at=now,
        )
    for n, node in enumerate(found):
        XidEvent.objects.create(
            node=node,
            gpu=0,
            code=(79, 48, 13)[n % 3],
            severity="critical",
            description="",
            first_seen_at=now,
            last_seen_at=now,
        )
        reading = {"gpu": 0, "uuid": f"GPU-{n}", "at": time.time() - 30, "utilization": 50.0}
        reading |= {"memory_used": 1.0, "memory_free": 1.0, "power": 300.0, "temperature": 40.0 + 7 * (n % 8)}
        embedded.write(node.pk, [reading])
    return found
