"""The production topology with RabbitMQ as Celery's broker (``GPUAAS_BROKER_URL``,
which Celery's documentation recommends for production), the broker cut (every
connection reset, new ones refused) with allocations in flight, and restored.

While it is down ``/readyz`` names the broker, the API still accepts allocations
(their record is saved; their wake-up is the reconciler's, decision 0064) and nothing
answers 500. Once it is back the worker has reconnected by itself, with no supervisor
restart, and every allocation in flight, those accepted meanwhile included, is ACTIVE
within a minute, each on a node of its own. The other faults run on the Redis broker
in test_prod_local_faults.py.
"""

from __future__ import annotations

import time

import httpx
import pytest
from django.db.models import Count

from apps.allocations.models import Allocation
from tests.support.processes import CuttablePath, wait_for
from tests.support.prodlocal import (
    PATIENCE_SECONDS,
    allocate,
    assert_answered,
    first_requests_succeed,
    in_flight,
    running_topology,
    states_of,
    tenant_fleet,
)

pytestmark = [pytest.mark.heavy(flushes=True), pytest.mark.production]

COMPLETES_WITHIN_SECONDS = 60  # the promise, from the broker's return
DOWN_FOR_SECONDS = 8  # long enough for the work in flight to meet the outage


@pytest.fixture(scope="module")
def broker_path():
    """The machine's RabbitMQ, reached through a path that can be cut."""
    path = CuttablePath(("127.0.0.1", 5672))
    yield path
    path.cut()


@pytest.fixture(scope="module")
def topology(django_db_setup, django_db_blocker, tmp_path_factory, broker_path, vhost):
    broker_url = f"amqp://guest:guest@127.0.0.1:{broker_path.port}/{vhost}"
    with running_topology(
        tmp_path_factory.mktemp("prod-local"), django_db_blocker, broker_url=broker_url
    ) as running:
        yield running


@pytest.fixture(scope="module")
def world(topology, django_db_blocker):
    with tenant_fleet(topology, django_db_blocker, nodes=6) as fleet:
        yield fleet


def test_the_broker_cut_and_restored(topology, world, broker_path, django_db_blocker):
    with django_db_blocker.unblock():
        allocations = in_flight(topology, world, 2)
    worker = topology.pid("worker")
    listing = f"/api/v1/projects/{world.project.pk}/allocations"

    broker_path.cut()
    down_at = time.monotonic()
    for base in (topology.url, *topology.web):
        ready = httpx.get(f"{base}/readyz", timeout=PATIENCE_SECONDS)
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"] == {"database": "ok", "cache": "ok", "broker": "unavailable"}
        listed = httpx.get(f"{base}{listing}", headers=world.bearer, timeout=PATIENCE_SECONDS)
        assert listed.status_code == 200, listed.text
        page = httpx.get(f"{base}/", headers={"Cookie": world.cookie}, timeout=PATIENCE_SECONDS)
        assert_answered(page, "broker")
    allocations += [allocate(topology, world) for _ in range(2)]  # accepted: 202
    time.sleep(max(0.0, DOWN_FOR_SECONDS - (time.monotonic() - down_at)))
    broker_path.restore()
    returned_at = time.monotonic()

    first_requests_succeed(topology, world)
    with django_db_blocker.unblock():
        wait_for(
            lambda: states_of(allocations) == {"ACTIVE"},
            timeout=max(1.0, returned_at + COMPLETES_WITHIN_SECONDS - time.monotonic()),
            what="every allocation in flight ACTIVE",
        )
        nodes = list(Allocation.objects.filter(pk__in=allocations).values_list("node_id", flat=True))
        assert len(set(nodes)) == len(nodes) == 4, nodes
        live = Allocation.objects.filter(state__in=Allocation.LIVE_STATES).values("node_id")
        assert not live.annotate(n=Count("id")).filter(n__gt=1).exists()
    # The worker came back on its own (kombu reconnects), not by supervisord's restart.
    assert topology.pid("worker") == worker
