"""The allocation page charts its GPUs' telemetry with uPlot in Chromium: one chart
per metric with a line per GPU, from the same service as the metrics API, in the
1 h, 24 h and 7 d windows, under the portal's CSP (no console errors); new
telemetry shows on the open page without a reload, told by the page's socket. The
dashboard charts a tenant's GPU-hours per day per project and gauges its quotas,
also on a phone's width; the usage page charts the month's charges by day.

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep a screenshot of the charts."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.utils import timezone
from playwright.sync_api import expect

from apps.allocations.models import Allocation
from apps.monitoring import services as monitoring
from apps.monitoring import tasks
from apps.monitoring.metrics import embedded
from apps.tenancy import quotas
from apps.tenancy.models import Membership
from tests.e2e.allocations import active_allocation_on
from tests.e2e.pages import sign_in
from tests.factories import FlavorFactory, ProjectFactory, TenantFactory, UserFactory
from tests.support.concurrency import in_own_thread
from tests.support.fleet import made_allocation, make_nodes
from tests.support.members import member

SCREENSHOTS = os.environ.get("GPUAAS_E2E_SCREENSHOTS")


def test_the_allocation_page_charts_its_gpus(portal, page, settings):
    settings.METRICS_URL = ""
    project = ProjectFactory(tenant=TenantFactory(tenant_id="acme", name="Acme"), project_id="cell-1")
    member("viewer", project=project, username="alice")
    allocation = active_allocation_on(project, "gpu-chart-001", "alice", enrolled=True)
    Allocation.objects.filter(pk=allocation.pk).update(
        state=Allocation.State.ACTIVE, activated_at=timezone.now() - timedelta(hours=3)
    )
    now = time.time()
    readings = [
        {
            "gpu": gpu,
            "uuid": f"GPU-chart-{gpu}",
            "at": moment,
            "utilization": 40.0 + gpu,
            "memory_used": 2000.0,
            "memory_free": 79559.0,
            "temperature": 50.0 + gpu,
            "power": 300.0,
        }
        for moment in range(int(now) - 2 * 3600, int(now), 30)
        for gpu in range(2)
    ]
    monitoring.record_telemetry(allocation.node, readings=readings, xids=[], exporter_port=None)
    tasks.rollup_metrics()  # the beat's work, every minute

    sign_in(page, portal.url, "alice")
    page.goto(f"{portal.url}/projects/{project.pk}/allocations/{allocation.pk}/")

    charts = page.locator("[data-gpu-charts]")
    charts.and_(page.locator('[data-loaded="1h"]')).wait_for()
    for metric in ("utilization", "memory_used", "temperature", "power"):
        figure = page.locator(f'figure[data-metric="{metric}"]')
        assert figure.locator("canvas").count() == 1
        assert int(figure.get_attribute("data-points")) >= 55
        assert figure.locator(".u-legend").inner_text().count("GPU ") == 2

    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / "gpu-charts.png"), full_page=True)
    page.click('button[data-window="24h"]')
    page.locator('[data-gpu-charts][data-loaded="24h"]').wait_for()
    assert 10 <= int(page.locator('figure[data-metric="temperature"]').get_attribute("data-points")) <= 13
    assert page.js_errors == []


def reading(gpu: int, moment: float, utilization: float) -> dict:
    return {
        "gpu": gpu,
        "uuid": f"GPU-live-{gpu}",
        "at": moment,
        "utilization": utilization + gpu,
        "memory_used": 2000.0,
        "memory_free": 79559.0,
        "temperature": 50.0,
        "power": 300.0,
    }


def test_new_telemetry_reaches_the_open_allocation_page(portal, page, settings):
    settings.METRICS_URL = ""
    project = ProjectFactory(tenant=TenantFactory(tenant_id="acme", name="Acme"), project_id="cell-1")
    member("viewer", project=project, username="alice")
    allocation = active_allocation_on(project, "gpu-live-001", "alice", enrolled=True)
    Allocation.objects.filter(pk=allocation.pk).update(activated_at=timezone.now() - timedelta(hours=2))
    # Readings up to ten minutes ago, stored as the agent's reports were (this is the page's past).
    now = time.time()
    past = range(int(now) - 3000, int(now) - 600, 30)
    embedded.write(allocation.node_id, [reading(gpu, moment, 40.0) for moment in past for gpu in range(2)])

    sign_in(page, portal.url, "alice")
    page.goto(f"{portal.url}/projects/{project.pk}/allocations/{allocation.pk}/")
    page.locator('[data-gpu-charts][data-loaded="1h"]').wait_for()
    page.locator("[data-live-status][data-state=live]").wait_for()
    utilization = page.locator('figure[data-metric="utilization"]')
    assert utilization.locator("[data-latest]").inner_text() == "GPU 0: 40 \u00b7 GPU 1: 41"
    points = int(utilization.get_attribute("data-points"))

    # The agent reports (POST /api/agent/v1/telemetry): the page shows it, no reload.
    in_own_thread(
        lambda: monitoring.record_telemetry(
            allocation.node,
            readings=[reading(gpu, time.time(), 97.0) for gpu in range(2)],
            xids=[],
            exporter_port=None,
        )
    )
    # Well before the page's one-minute timer: the socket told it.
    expect(utilization.locator("[data-latest]")).to_have_text("GPU 0: 97 \u00b7 GPU 1: 98", timeout=20_000)
    assert int(utilization.get_attribute("data-points")) == points + 1
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert page.js_errors == []


def test_the_dashboard_charts_gpu_hours_and_gauges_quotas_on_a_phones_width(portal, page):
    project = ProjectFactory(
        tenant=TenantFactory(tenant_id="acme", name="Acme"), project_id="cell-1", name="Cell 1"
    )
    Membership.objects.create(
        user=UserFactory(username="bea"), tenant=project.tenant, project=None, role="billing_admin"
    )
    flavor = FlavorFactory(name="h100-8x", gpus_per_node=8, rate_per_node_hour="10.5")
    yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    made_allocation(project, make_nodes(flavor, 1)[0], flavor, yesterday, yesterday + timedelta(hours=3))
    quotas.set_quota(project.tenant, {"gpus": 16})

    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, portal.url, "bea")
    figure = page.locator("[data-usage-chart]")
    figure.and_(page.locator('[data-loaded="true"]')).wait_for()
    assert figure.locator("canvas").count() == 1
    assert "24.00 GPU-hours in 1 project" in figure.locator("[data-chart-status]").inner_text()
    figure.locator("summary").click()
    rows = figure.locator("[data-chart-table] tbody tr").all_inner_texts()
    assert rows == [f"{yesterday.date().isoformat()}\tCell 1\t24.00"]
    gauge = page.locator('[data-quota-gauges] li[data-resource="gpus"]')
    assert "0 of 16 (0.0 %)" in gauge.inner_text()
    assert gauge.locator("a").get_attribute("href") == "/tenants/acme/quota/"
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / "usage-chart.png"), full_page=True)

    page.goto(f"{portal.url}/tenants/acme/usage/?month={yesterday:%Y-%m}")
    charges = page.locator('[data-usage-chart][data-loaded="true"]')
    charges.wait_for()
    assert charges.locator("canvas").count() == 1
    assert "31.50 USD in 1 project from" in charges.locator("[data-chart-status]").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / "charges-chart.png"), full_page=True)
    assert page.js_errors == []
