"""The embedded store keeps what agents report: readings averaged per GPU and
minute (a retried report counts once), rolled up into 5-minute and hourly rows,
and pruned past the retention operators set."""

from __future__ import annotations

import time

import pytest

from apps.monitoring import tasks
from apps.monitoring.metrics import embedded, source
from apps.monitoring.models import GpuSample, XidEvent
from tests.support.agent import enroll
from tests.support.fleet import make_nodes
from tests.support.telemetry import AGENT_TELEMETRY, readings

pytestmark = pytest.mark.django_db
NOW = 1_795_000_000 // 3600 * 3600  # an hour's start


@pytest.fixture
def node(flavor):
    return make_nodes(flavor, 1, prefix="store")[0]


def rows(node, resolution):
    return list(
        GpuSample.objects.filter(node=node, resolution=resolution, gpu=0)
        .order_by("ts")
        .values_list("ts", "count", "utilization")
    )


def test_readings_of_a_minute_are_averaged_and_a_retry_counts_once(node):
    first = readings(NOW, NOW + 15, 15, gpus=1, utilization=10.0)
    embedded.write(node.pk, first)
    embedded.write(node.pk, first)  # the agent retried: nothing changes
    embedded.write(node.pk, readings(NOW + 30, NOW + 30, 15, gpus=1, utilization=40.0))
    assert rows(node, 60) == [(NOW, 3, 20.0)]
    # Two readings of one GPU and minute in one report are both counted.
    embedded.write(node.pk, readings(NOW + 60, NOW + 75, 15, gpus=1, utilization=30.0))
    assert rows(node, 60)[1] == (NOW + 60, 2, 30.0)


def test_rollups_and_retention(node, settings):
    settings.METRICS_URL = ""
    settings.METRICS_RETENTION_DAYS = 2
    day = 86400
    start = NOW - 3 * day
    embedded.write(node.pk, readings(start, NOW, 60, gpus=1, utilization=50.0))
    embedded.rollup(now=NOW)
    embedded.rollup(now=NOW)  # again: the same rows
    assert len(rows(node, 300)) == 3 * day // 300
    assert len(rows(node, 3600)) == 3 * day // 3600
    assert {u for _, _, u in rows(node, 3600)} == {50.0}
    assert rows(node, 3600)[0][1] == 60  # an hour of minute readings

    embedded.prune(now=NOW)
    assert rows(node, 60)[0][0] >= NOW - day  # minutes: a day
    assert rows(node, 300)[0][0] >= NOW - 2 * day  # 5 minutes: a week, capped by the retention
    assert rows(node, 3600)[0][0] >= NOW - 2 * day
    assert len(rows(node, 3600)) == 2 * day // 3600


def test_the_beat_tasks_leave_the_embedded_store_alone_when_a_database_scrapes(node, settings):
    settings.METRICS_URL = "http://127.0.0.1:9"  # nothing listens: nothing may be asked
    embedded.write(node.pk, readings(NOW - 7200, NOW, 60, gpus=1))
    tasks.rollup_metrics()
    assert tasks.prune_metrics() == 0
    assert not GpuSample.objects.exclude(resolution=60).exists()


def test_instant_readings_are_each_gpus_latest(node, settings):
    settings.METRICS_URL = ""
    now = time.time()
    embedded.write(node.pk, readings(now - 120, now, 30, gpus=2, temperature=40.0))
    latest = {r.gpu: r.value for r in source().instant("temperature")}
    assert latest == {0: 40.0, 1: 41.0}


def test_an_agent_writes_readings_only_between_its_enrollment_and_now(api, node, settings):
    """The node keeps its identity from one tenant to the next, and readings belong to
    whichever allocation held the node at their time: its next tenant's agent (root on it,
    freshly enrolled) must not write into the time before it enrolled, an earlier tenant's.
    Nor ahead of now: such rows would never age out of the store."""
    settings.METRICS_URL = ""
    now = time.time()
    as_agent = {"format": "json", "HTTP_AUTHORIZATION": f"Node {enroll(api, node, '10.0.0.9')}"}

    earlier_tenants = readings(now - 2 * 3600, now - 3600, 60, gpus=1, utilization=99.0)
    ahead = readings(now + 86400, now + 365 * 86400, 86400, gpus=1, utilization=99.0)
    own = readings(now, now, 60, gpus=1, utilization=10.0)
    response = api.post(AGENT_TELEMETRY, {"readings": earlier_tenants + ahead + own}, **as_agent)

    assert response.status_code == 200, response.content
    stored = rows(node, 60)
    assert stored, "the agent's own reading is kept"
    assert all(now - 60 <= ts <= now for ts, _, _ in stored)
    earlier_xid = {"xids": [{"gpu": 0, "code": 79, "at": now - 3600}]}
    assert api.post(AGENT_TELEMETRY, earlier_xid, **as_agent).status_code == 200
    assert not XidEvent.objects.filter(node=node).exists()
