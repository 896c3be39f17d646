"""Concurrent allocation requests never share a node and never overrun quota."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.allocations import services
from apps.allocations.models import Allocation
from apps.core.errors import ApiError
from apps.metering import services as metering
from apps.tenancy import principal as principals
from tests.allocations.conftest import make_nodes
from tests.conftest import member
from tests.factories import ProjectFactory, TenantFactory

pytestmark = pytest.mark.django_db(transaction=True)


def run_concurrently(calls):
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def worker(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except ApiError as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _tenant_with_project(name, flavor_nodes_quota):
    from apps.networking import services as networking
    from apps.storage import services as storage

    tenant = TenantFactory(tenant_id=name)
    project = ProjectFactory(tenant=tenant)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    metering.set_quota(tenant, flavor_nodes_quota)
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
    results = run_concurrently(calls)
    granted = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if isinstance(r, ApiError)]
    assert len(granted) == 3 and len(refused) == 1  # 6 nodes, 2 each: all or nothing
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
    results = run_concurrently(calls)
    assert sum(isinstance(r, list) for r in results) == 3  # 24 GPUs / 8 per node
    assert all(r.code == "quota_exceeded" for r in results if isinstance(r, ApiError))
    assert Allocation.objects.filter(tenant=project.tenant).count() == 3
