from __future__ import annotations

import pytest

from apps.allocations import services as allocations
from apps.tenancy import principal as principals
from gpuaas.celery import app as celery_app
from tests.support.fake_maas import FakeMaas
from tests.support.fake_ndfc import FakeNdfc


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


@pytest.fixture
def real_broker():
    """Tasks go to Redis for a real worker to take, not run eagerly in the test."""
    celery_app.conf.task_always_eager = False
    celery_app.control.purge()
    yield
    celery_app.conf.task_always_eager = True
    # What the test's workers and their beat left unconsumed would run under the next
    # worker a test of this xdist worker starts.
    celery_app.control.purge()


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
