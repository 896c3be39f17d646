from __future__ import annotations

import pytest

from apps.allocations import services as allocations
from apps.allocations.models import Allocation, Node
from apps.catalog.models import Flavor
from apps.core.models import SimulatedFault
from apps.networking import services as networking
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from gpuaas.celery import app as celery_app
from tests.conftest import member
from tests.support.fake_maas import FakeMaas
from tests.support.fake_ndfc import FakeNdfc


@pytest.fixture
def flavor(db):
    return Flavor.objects.create(
        name="h100-8x",
        gpu_model="H100",
        gpus_per_node=8,
        cpu_cores=112,
        memory_gb=2048,
        rate_per_node_hour="98.32",
    )


@pytest.fixture
def small_flavor(db):
    return Flavor.objects.create(
        name="h100-1x", gpu_model="H100", gpus_per_node=1, cpu_cores=16, memory_gb=256
    )


def make_nodes(flavor, count: int, prefix: str = "gpu") -> list[Node]:
    return [
        Node.objects.create(
            hostname=f"{prefix}-{flavor.name}-{i:03d}",
            flavor=flavor,
            state=Node.State.AVAILABLE,
            approved=True,
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
    return Allocation.objects.create(
        node=node,
        tenant=project.tenant,
        project=project,
        flavor=flavor,
        gpus=flavor.gpus_per_node,
        os_image="ubuntu-22.04",
        state=state,
        requested_by="test",
        activated_at=activated,
        finished_at=finished,
    )


@pytest.fixture
def nodes(flavor):
    return make_nodes(flavor, 4)


@pytest.fixture
def ready_tenant(tenant):
    """The ``acme`` tenant with its network, storage and a roomy quota."""
    networking.load_pool(prefix="vrf", count=4, first_vni=50001, first_vlan=1000)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    quotas.set_quota(tenant, {"gpus": 64, "nodes": 8, "storage_gb": 1_000_000})
    return tenant


@pytest.fixture
def allocator(ready_tenant, project):
    return member("project_admin", project=project)


@pytest.fixture
def ccp_admin_token(ccp_issuer, ready_tenant, project):
    def make(roles=("Cell Administrator",), project_id=None):
        return ccp_issuer.token(
            {
                "domain_id": ready_tenant.tenant_id,
                "project_id": project_id or project.project_id,
                "roles": list(roles),
            }
        )

    return make


def fault(system: str, operation: str, **kwargs) -> SimulatedFault:
    return SimulatedFault.objects.create(system=system, operation=operation, **kwargs)


@pytest.fixture
def real_broker():
    """Tasks go to Redis for a real worker to take, not run eagerly in the test."""
    celery_app.conf.task_always_eager = False
    celery_app.connection_for_write().default_channel.client.flushdb()
    yield
    celery_app.conf.task_always_eager = True


@pytest.fixture
def pending_allocation(allocator, project, nodes, django_capture_on_commit_callbacks):
    """An allocation just requested, whose pipeline task has not run."""
    with django_capture_on_commit_callbacks(execute=False):
        [allocation] = allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
    return allocation


# The real MAAS and NDFC drivers, against local servers that speak those APIs.
@pytest.fixture
def fake_maas(settings, nodes):
    server = FakeMaas(api_key="consumer:token:secret", deploy_seconds=0.2)
    for index, node in enumerate(nodes):
        server.add_machine(node.hostname, f"abc{index:03d}")
    settings.MAAS_URL, settings.MAAS_API_KEY = server.url, "consumer:token:secret"
    yield server
    server.close()


@pytest.fixture
def fake_ndfc(settings):
    server = FakeNdfc(password="s3cret")
    settings.NDFC_URL, settings.NDFC_PASSWORD, settings.NDFC_FABRIC = server.url, "s3cret", server.fabric
    yield server
    server.close()


@pytest.fixture
def real_drivers(settings, fake_maas, fake_ndfc):
    settings.DRIVERS = {"*": "simulated", "maas": "real", "ndfc": "real"}
    settings.PIPELINE_POLL_SECONDS = 0.05
    settings.PIPELINE_BACKOFF_SECONDS = (0.0, 0.0)
