"""Concurrent allocation requests never share a node and never overrun quota."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from apps.allocations import nodes, services
from apps.allocations.models import Allocation, Node
from apps.core.errors import ApiError, InvalidState
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from tests.factories import ProjectFactory, TenantFactory
from tests.support.concurrency import a_lock_waiter, at_once
from tests.support.fleet import make_nodes
from tests.support.members import member

pytestmark = pytest.mark.django_db(transaction=True)


def _tenant_with_project(name, flavor_nodes_quota):
    from apps.networking import services as networking
    from apps.storage import services as storage

    tenant = TenantFactory(tenant_id=name)
    project = ProjectFactory(tenant=tenant)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    quotas.set_quota(tenant, flavor_nodes_quota)
    return project


def test_racing_requests_of_many_tenants_never_share_a_node(settings, flavor):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from apps.networking import services as networking

    networking.load_pool(prefix="vrf", count=8, first_vni=1, first_vlan=100)
    make_nodes(flavor, 6)
    projects = [_tenant_with_project(f"t{i}", {"gpus": 64, "nodes": 8}) for i in range(4)]
    callers = [principals.for_user(member("project_admin", project=p)) for p in projects]
    calls = [
        (
            lambda c=caller, p=project: services.allocate(
                c, p, flavor_name="h100-8x", os_image="ubuntu-22.04", count=2
            )
        )
        for caller, project in zip(callers, projects, strict=True)
    ]
    results = at_once(calls, answers=(ApiError,))
    granted = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if isinstance(r, ApiError)]
    assert len(granted) == 3
    assert len(refused) == 1  # 6 nodes, 2 each: all or nothing
    assert refused[0].code == "conflict"
    node_ids = [a.node_id for batch in granted for a in batch]
    assert len(node_ids) == len(set(node_ids)) == 6
    assert Allocation.objects.count() == 6


def test_racing_requests_of_one_tenant_never_overrun_its_quota(flavor):
    from apps.networking import services as networking

    networking.load_pool(prefix="vrf", count=2, first_vni=1, first_vlan=100)
    make_nodes(flavor, 8)
    project = _tenant_with_project("solo", {"gpus": 24, "nodes": 8})
    caller = principals.for_user(member("project_admin", project=project))
    calls = [
        lambda: services.allocate(caller, project, flavor_name="h100-8x", os_image="ubuntu-22.04")
        for _ in range(6)
    ]
    results = at_once(calls, answers=(ApiError,))
    assert sum(isinstance(r, list) for r in results) == 3  # 24 GPUs / 8 per node
    assert all(r.code == "quota_exceeded" for r in results if isinstance(r, ApiError))
    assert Allocation.objects.filter(tenant=project.tenant).count() == 3


def test_maintenance_racing_an_uncommitted_allocation_is_refused(flavor, platform_admin):
    """The operator asks while an allocation of the node is reserved but not yet
    committed: maintenance must wait for it and refuse, not leave a PROVISIONING
    allocation on a MAINTENANCE node."""
    from apps.networking import services as networking

    networking.load_pool(prefix="vrf", count=1, first_vni=1, first_vlan=100)
    [node] = make_nodes(flavor, 1)
    project = _tenant_with_project("solo", {"gpus": 64, "nodes": 8})
    caller = principals.for_user(member("project_admin", project=project))
    operator = principals.for_user(platform_admin)
    reserved, commit = threading.Event(), threading.Event()

    def allocate_and_hold_the_commit():
        # allocate()'s transaction nests in this one, so its reservation (node row
        # locked, allocation inserted) stays uncommitted until the operator is waiting.
        with transaction.atomic():
            allocations = services.allocate(caller, project, flavor_name="h100-8x", os_image="ubuntu-22.04")
            reserved.set()
            commit.wait(timeout=30)
        return allocations

    def put_in_maintenance():
        reserved.wait(timeout=30)
        return nodes.set_maintenance(operator, node, "fan swap")

    def commit_once_the_operator_waits():
        reserved.wait(timeout=30)
        waited = a_lock_waiter()
        commit.set()
        return waited

    allocated, maintenance, operator_waited = at_once(
        [allocate_and_hold_the_commit, put_in_maintenance, commit_once_the_operator_waits],
        answers=(ApiError,),
    )
    assert operator_waited
    assert isinstance(allocated, list)
    assert isinstance(maintenance, InvalidState)
    node.refresh_from_db()
    assert node.state != Node.State.MAINTENANCE
    assert Allocation.objects.get(node=node).state in Allocation.LIVE_STATES
    assert not AuditEvent.objects.filter(action="node.maintenance").exists()
