"""A project admin starts from the dashboard's empty state, allocates a node with its
price in view, sees the node's tile, and opens an app from the dashboard, in headless
Chromium; and the prices the allocate page shows are the rate card's.

The pipeline runs eagerly inside the form's POST (simulated drivers, no step
latency); the app is launched as an app controller would (the services, in a thread
of its own) and its route leads to the test upstream, which answers the app's entry
page with a JupyterLab-like page.

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep screenshots of the dashboard and
the allocate form.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.allocations.models import Allocation, Node
from apps.metering.models import Rate
from tests.e2e.pages import shot, sign_in
from tests.factories import FlavorFactory
from tests.support.catalog import publish
from tests.support.concurrency import in_own_thread
from tests.support.fleet import make_nodes
from tests.support.members import member
from tests.support.proxy import proxied_manifest, start_instance


@pytest.fixture
def rate_card(db):
    """Two flavors priced as an operator prices them: ``h100-8x`` by dated rates (an
    old one superseded) plus a GPU-hour rate; ``h100-1x`` by its flavor price alone."""
    big = FlavorFactory(
        name="h100-8x", gpus_per_node=8, cpu_cores=112, memory_gb=2048, rate_per_node_hour="90"
    )
    small = FlavorFactory(
        name="h100-1x", gpus_per_node=1, cpu_cores=16, memory_gb=256, rate_per_node_hour="3.10"
    )
    now = timezone.now()
    Rate.objects.create(
        resource="node_hours", flavor=big, rate="9.00", effective_from=now - timedelta(days=60)
    )
    Rate.objects.create(
        resource="node_hours", flavor=big, rate="10.50", effective_from=now - timedelta(days=2)
    )
    Rate.objects.create(resource="gpu_hours", rate="0.25", effective_from=now - timedelta(days=2))
    make_nodes(big, 3)
    make_nodes(small, 2, prefix="small")
    # A node-hour of h100-8x: 10.50 + 8 GPUs x 0.25; of h100-1x: 3.10 + 1 x 0.25.
    return {"h100-8x": Decimal("12.50"), "h100-1x": Decimal("3.35")}


@pytest.fixture
def alice(ready_tenant, project):
    user = member("project_admin", project=project)
    user.set_password("pw")
    user.save()
    return user


def test_price_shown_before_allocating(portal, page, alice, project, rate_card):
    sign_in(page, portal.url, alice.username)
    page.goto(f"{portal.url}/projects/{project.pk}/allocations/new/")

    for name, price in rate_card.items():
        card = page.locator(f".flavor-card[data-flavor={name}]")
        assert card.locator("[data-field=price]").inner_text().startswith(f"${price}")
    big = page.locator(".flavor-card[data-flavor=h100-8x]")
    assert big.locator("[data-field=gpus]").inner_text() == "8 × H100"  # noqa: RUF001 - the page's sign
    assert big.locator("[data-field=cpu]").inner_text() == "112 cores"
    assert big.locator("[data-field=memory]").inner_text() == "2,048 GB"
    assert big.locator("[data-field=free]").inner_text() == "3"

    # The first flavor with a free node is chosen, and the check prices one node of it.
    plan = page.locator("#allocation-plan")
    assert page.locator(".flavor-card[data-flavor=h100-1x] input").is_checked()
    assert plan.locator("[data-estimate=hour]").inner_text() == "$3.35"
    assert plan.locator("[data-estimate=day]").inner_text() == "$80.40"

    # Two nodes: the live check prices them as the user types.
    page.fill("input[name=count]", "2")
    page.wait_for_selector("#allocation-plan [data-estimate=hour]:text-is('$6.70')")
    assert plan.locator("[data-estimate=day]").inner_text() == "$160.80"
    # Another flavor: its own rate card.
    page.click(".flavor-card[data-flavor=h100-8x]")
    page.wait_for_selector("#allocation-plan [data-estimate=hour]:text-is('$25.00')")
    assert plan.locator("[data-estimate=day]").inner_text() == "$600.00"
    shot(page, "allocate-priced")
    assert Allocation.objects.count() == 0
    assert page.js_errors == [], page.js_errors


def _enroll(node_id) -> None:
    """The node's agent counts as enrolled from this machine: its apps are on loopback."""
    Node.objects.filter(pk=node_id).update(credential_hash="0" * 64, agent_address="127.0.0.1")


def test_dashboard_to_allocate_to_open_app(portal, page, alice, project, rate_card, upstream):
    sign_in(page, portal.url, alice.username)

    # Nothing yet: the dashboard says what to do first.
    empty = page.locator("[data-empty=running]")
    assert "Nothing running yet" in empty.inner_text()
    shot(page, "dashboard-empty")
    empty.locator("text=Allocate nodes").click()
    page.wait_for_url(f"{portal.url}/projects/{project.pk}/allocations/new/")
    page.click(".flavor-card[data-flavor=h100-8x]")
    page.wait_for_selector("#allocation-plan [data-estimate=hour]:text-is('$12.50')")
    assert page.locator("#allocation-plan [data-verdict=allowed]").count() == 1
    page.click("#allocation-submit button[type=submit]")
    page.wait_for_url(re.compile(rf"/projects/{project.pk}/allocations/[0-9a-f-]{{36}}/$"))
    allocation = Allocation.objects.get()
    assert allocation.state == Allocation.State.ACTIVE  # the pipeline ran within the request
    assert page.locator("#allocation-detail [data-field=accrued]").inner_text().startswith("$")

    # Its tile on the dashboard: state, GPUs, uptime and what it has cost.
    page.click("nav.nav >> text=Dashboard")
    page.wait_for_url(f"{portal.url}/")
    tile = page.locator(f"[data-allocation-id='{allocation.pk}']")
    assert tile.locator("[data-field=state]").inner_text() == "ACTIVE"
    assert tile.locator("[data-field=gpus]").inner_text() == "8 × H100"  # noqa: RUF001
    assert tile.locator("[data-field=uptime]").inner_text()
    assert re.fullmatch(r"\$\d+\.\d\d", tile.locator("[data-field=accrued]").inner_text())
    assert page.locator("[data-empty=running]").count() == 0

    # An app controller launches an app on it (the test upstream behind the proxy).
    in_own_thread(_enroll, allocation.node_id)
    app = publish("notebook", proxied_manifest(), name="Notebook")
    instance = in_own_thread(
        lambda: start_instance(alice, project, allocation, app, host=upstream.host, port=upstream.port)
    )
    page.reload()
    app_tile = page.locator(f"[data-instance-id='{instance.pk}']")
    assert app_tile.locator("[data-field=state]").inner_text() == "running"
    shot(page, "dashboard-running")

    # Open: through the launcher, to the app in its own tab.
    with page.context.expect_page() as opened:
        app_tile.locator("text=Open Notebook").click()
    app_page = opened.value
    app_page.wait_for_url(re.compile(rf"/w/{instance.pk}/web/lab"), timeout=20_000)
    app_page.wait_for_selector("body >> text=JupyterLab")
    app_page.close()

    # The instance's App UI tab embeds it, and can take the whole window.
    page.click(f"[data-instance-id='{instance.pk}'] >> text={instance.name}")
    assert page.locator(".status-card [data-open-app]").inner_text() == "Open Notebook"
    shot(page, "instance-overview")
    page.click("nav.tabs >> text=App UI")
    page.frame_locator("iframe[data-app-frame]").locator("body >> text=JupyterLab").wait_for()
    page.click("[data-maximize]")
    card = page.locator("[data-maximizable]")
    assert card.bounding_box()["width"] == page.viewport_size["width"]
    page.keyboard.press("Escape")
    assert card.bounding_box()["width"] < page.viewport_size["width"]
    assert page.js_errors == []
