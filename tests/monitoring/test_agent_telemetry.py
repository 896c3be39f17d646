"""Real node agents report GPU telemetry: a real VictoriaMetrics scrapes their
DCGM-form endpoints through the targets file the platform keeps; on the embedded
default they report to the platform. ``simulate_gpu`` holds readings they serve."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from django.core.management import call_command

from apps.allocations.models import Allocation
from apps.monitoring import tasks
from apps.monitoring.metrics import source
from apps.monitoring.models import GpuSample, NodeExporter, XidEvent
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
INTEGRATION = {"roles": ["GPUaaS Platform Integration"]}


@pytest.fixture
def scraped(settings, victoria, active_allocation):
    """Agents read every second, and the platform points the scraper at them."""
    settings.METRICS_URL = victoria.url
    settings.METRICS_TARGETS_FILE = victoria.targets
    settings.METRICS_INTERVAL_SECONDS = 1
    # The tenant has held the node for a while (the records are what attribution reads).
    Allocation.objects.filter(pk=active_allocation.pk).update(
        activated_at=active_allocation.activated_at - timedelta(hours=1)
    )
    yield victoria
    victoria.targets.write_text("[]")


@pytest.fixture
def reporting(settings, active_allocation):
    settings.METRICS_URL = ""
    settings.METRICS_INTERVAL_SECONDS = 1
    Allocation.objects.filter(pk=active_allocation.pk).update(
        activated_at=active_allocation.activated_at - timedelta(hours=1)
    )


def test_victoria_metrics_scrapes_the_agent_with_the_allocation_labels(
    scraped, node_agent, active_allocation, api, ccp_issuer
):
    node = active_allocation.node
    exporter = wait_for(lambda: NodeExporter.objects.filter(node=node).first(), what="the agent's exporter")
    assert tasks.write_scrape_targets() is True
    [group] = json.loads(scraped.targets.read_text())
    assert group == {
        "targets": [f"127.0.0.1:{exporter.port}"],
        "labels": {
            "node_id": str(node.pk),
            "hostname": node.hostname,
            "allocation_id": str(active_allocation.pk),
            "tenant_id": "acme",
            "project_id": "cell-1",
        },
    }

    page = httpx.get(f"http://127.0.0.1:{exporter.port}/metrics").text
    for name in ("GPU_UTIL", "FB_USED", "FB_FREE", "GPU_TEMP", "POWER_USAGE", "XID_ERRORS"):
        assert f'DCGM_FI_DEV_{name}{{Hostname="{node.hostname}",UUID="GPU-' in page
    assert page.count("DCGM_FI_DEV_GPU_TEMP{") == 8

    series = wait_for(
        lambda: scraped.series(f'DCGM_FI_DEV_GPU_TEMP{{node_id="{node.pk}"}}'), what="scraped series"
    )
    assert {s["tenant_id"] for s in series} == {"acme"}
    assert sorted(int(s["gpu"]) for s in series) == list(range(8))

    token = ccp_issuer.token(INTEGRATION)

    def answered():
        scraped.flush()  # what was scraped, searchable now (tests/support/victoria.py)
        body = api.get("/api/metrics/gpu/acme", {"step": "2"}, HTTP_AUTHORIZATION=f"Bearer {token}").json()
        return body["series"] if len(body["series"]) == 8 * 4 else None

    found = wait_for(answered, what="the API answering from VictoriaMetrics")
    assert {s["allocation_id"] for s in found} == {str(active_allocation.pk)}
    idle = [v for s in found if s["metric"] == "utilization" for _, v in s["points"]]
    assert idle
    assert max(idle) < 5  # no workload on the node: the simulated GPUs idle

    call_command("simulate_gpu", node.hostname, "--gpu", "3", "--temperature", "91")

    def held():
        scraped.flush()
        readings = {r.gpu: r.value for r in source().instant("temperature", [str(node.pk)])}
        return readings if readings.get(3) == 91 else None

    readings = wait_for(held, what="the held temperature scraped")
    assert max(v for gpu, v in readings.items() if gpu != 3) < 60


def test_an_xid_error_is_served_and_recorded_once(scraped, node_agent, active_allocation):
    node = active_allocation.node
    call_command("simulate_gpu", str(node.pk), "--gpu", "2", "--xid", "79")
    event = wait_for(lambda: XidEvent.objects.filter(node=node).first(), what="the XID event")
    assert (event.gpu, event.code, event.severity, event.is_open) == (2, 79, "critical", True)
    exporter = NodeExporter.objects.get(node=node)
    # One client for the page's polls: a client per request built an SSL context each
    # time (about 24 ms of CPU).
    with httpx.Client(base_url=f"http://127.0.0.1:{exporter.port}") as agent_page:
        page = agent_page.get("/metrics").text
        labels = f'Hostname="{node.hostname}",UUID="{event.uuid}",device="nvidia2",gpu="2"'
        assert f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 79.0" in page
        # Held, the error is not reported again with every reading: one event, one occurrence.
        for _ in range(3):  # each new page is a new reading, after a report went out
            wait_for(lambda seen=page: agent_page.get("/metrics").text != seen)
            page = agent_page.get("/metrics").text
    call_command("simulate_gpu", node.hostname, "--clear")
    assert XidEvent.objects.filter(node=node).count() == 1
    assert XidEvent.objects.get(node=node).occurrences == 1


def test_on_the_embedded_default_the_agent_reports_to_the_platform(
    reporting, node_agent, active_allocation, api, ccp_issuer
):
    node = active_allocation.node
    wait_for(
        lambda: GpuSample.objects.filter(node=node).values("gpu").distinct().count() == 8,
        what="readings of the node's 8 GPUs",
    )
    assert tasks.write_scrape_targets() is False  # nobody scrapes: no target file
    token = ccp_issuer.token(INTEGRATION)
    body = api.get("/api/metrics/gpu/acme", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert len(body["series"]) == 8 * 4
    assert all(s["points"] for s in body["series"])
    assert {s["uuid"] for s in body["series"]} == {
        r.uuid for r in source().instant("utilization", [str(node.pk)])
    }
