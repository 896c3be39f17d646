"""A project admin allocates a node in a real browser and watches it become
ACTIVE, then RELEASED, live over the project's WebSocket, without a reload.

The pipeline runs as in production: the web request only enqueues (Celery not
eager), a real Celery worker thread in this process consumes from Redis, and
its state changes reach the page through the Redis channel layer. (Eager tasks
would run the whole pipeline inside the form's POST, so the page would only
ever see the final state.)

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep screenshots of the allocate
page and of the detail page mid-provisioning.
"""

from __future__ import annotations

import re

import pytest

from apps.allocations import events, services
from apps.allocations.models import Allocation, Node
from apps.networking import services as networking
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from apps.tenancy.models import Membership
from tests.e2e.allocations import alices_allocation
from tests.e2e.pages import SCREENSHOTS, shot, sign_in
from tests.factories import FlavorFactory, NodeFactory, ProjectFactory, TenantFactory
from tests.support.concurrency import in_own_thread
from tests.support.members import member

# Samples the detail page's live fields every 50 ms (through DevTools, not subject to the CSP).
RECORD_LIVE_FIELDS = """() => {
  window.__noReload = true;
  window.__seen = [];
  const sample = () => {
    const state = document.querySelector('#allocation-detail [data-field="state"]');
    const bar = document.querySelector('#allocation-detail progress[data-field="progress"]');
    const entry = state && bar ? state.textContent.trim() + ' ' + bar.value : null;
    if (entry && window.__seen[window.__seen.length - 1] !== entry) window.__seen.push(entry);
  };
  sample();
  setInterval(sample, 50);
}"""


@pytest.fixture
def world(db):
    tenant = TenantFactory(tenant_id="acme", name="Acme")
    project = ProjectFactory(tenant=tenant, project_id="training", name="Training")
    networking.load_pool(prefix="vrf", count=2, first_vni=50001, first_vlan=1000)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    quotas.set_quota(tenant, {"gpus": 16, "nodes": 8})  # two 8-GPU nodes at most
    flavor = FlavorFactory(name="h100-8x")
    for i in range(3):
        NodeFactory(hostname=f"gpu-{i:03d}", flavor=flavor)
    member("project_admin", project=project, username="alice")
    return project


def test_allocate_and_release_live(world, worker, portal, page):
    project = world
    base = f"{portal.url}/projects/{project.pk}"
    sign_in(page, portal.url, "alice")

    # The project's Allocations tab (htmx) opens its socket; then the allocate form.
    page.goto(f"{base}/")
    page.click("nav.tabs >> text=Allocations")
    page.wait_for_url(f"{base}/allocations/")
    page.wait_for_selector("#allocations [data-live-status][data-state=live]")
    page.click("text=Allocate nodes")
    page.wait_for_url(f"{base}/allocations/new/")

    plan, submit = page.locator("#allocation-plan"), page.locator("#allocation-submit button[type=submit]")
    assert plan.locator("[data-verdict]").get_attribute("data-verdict") == "allowed"
    assert submit.is_enabled()

    # Beyond the quota while typing: refused, itemized, the submit disabled.
    page.fill("input[name=count]", "3")
    page.wait_for_selector("#allocation-plan [data-verdict=refused]")
    assert "Quota exceeded for gpus" in plan.inner_text()
    assert plan.locator("tr.quota-over[data-resource=gpus]").count() == 1
    assert submit.is_disabled()
    shot(page, "allocate-over-quota")

    # At the limit: allowed, with the 90 % warning.
    page.fill("input[name=count]", "2")
    page.wait_for_selector("#allocation-plan tr.quota-90[data-resource=gpus]")
    assert submit.is_enabled()
    shot(page, "allocate-at-limit")

    page.fill("input[name=count]", "1")
    page.wait_for_selector("#allocation-plan [data-verdict=allowed] >> text=1 node")
    assert Allocation.objects.count() == 0  # the checks took nothing
    submit.click()
    page.wait_for_url(re.compile(rf"{re.escape(base)}/allocations/[0-9a-f-]{{36}}/$"))
    allocation = Allocation.objects.get()
    assert "provisioning has started" in page.locator("#messages").inner_text()

    # Provisioning, watched live: the badge and bar move without a reload.
    page.evaluate(RECORD_LIVE_FIELDS)
    page.wait_for_selector("#allocation-detail [data-field=state]:text-is('PROVISIONING')", timeout=10_000)
    page.wait_for_function(
        "() => window.__seen.some(e => /^PROVISIONING [1-9]\\d?$/.test(e))", timeout=10_000
    )
    if SCREENSHOTS:  # the timeline catches up through its refresh while the OS deploys
        page.wait_for_selector("tr[data-step='provision:os_deploy'] >> text=Running", timeout=5_000)
        shot(page, "detail-provisioning")
    page.wait_for_selector("#allocation-detail [data-field=state]:text-is('ACTIVE')", timeout=15_000)
    seen = page.evaluate("window.__seen")
    assert page.evaluate("window.__noReload") is True
    assert seen[-1] == "ACTIVE 100", seen
    progress = [int(entry.split()[1]) for entry in seen]
    assert progress == sorted(progress), seen
    assert page.locator("#allocation-detail .badge-ok[data-field=state]").count() == 1
    # The refreshed body brings the timeline and the Release action.
    page.wait_for_selector("#allocation-detail tr[data-step='provision:agent'] >> text=Succeeded")
    # Refreshes keep the message, turned into the next step.
    page.wait_for_selector("#messages [data-next-step-message] >> text=gpu-000 is ready")

    # Release (erasing disks), confirmed on its own page, then watched to RELEASED.
    page.click("#allocation-detail >> text=Release")
    page.wait_for_url(f"{base}/allocations/{allocation.pk}/release/")
    assert page.locator("input[name=drain]").is_checked()
    page.check("input[name=erase_disk]")
    page.click("button:has-text('Release node')")
    page.wait_for_url(f"{base}/allocations/{allocation.pk}/")
    page.evaluate(RECORD_LIVE_FIELDS)
    page.wait_for_selector("#allocation-detail [data-field=state]:text-is('RELEASED')", timeout=15_000)
    assert page.evaluate("window.__noReload") is True
    page.wait_for_selector("#allocation-detail tr[data-step='release:network_detach'] >> text=Succeeded")
    assert page.locator("#allocation-detail a.btn-danger").count() == 0  # nothing left to release

    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.RELEASED
    assert allocation.erase_disk
    assert allocation.drain
    assert Node.objects.get(pk=allocation.node_id).state == Node.State.AVAILABLE
    assert page.js_errors == []


def _allocate(principal, project):
    return services.allocate(principal, project, flavor_name="h100-8x", os_image="rocky-9")


def test_list_shows_new_allocations_and_their_progress_live(world, worker, portal, page):
    project = world
    sign_in(page, portal.url, "alice")
    page.goto(f"{portal.url}/projects/{project.pk}/allocations/")
    page.wait_for_selector("#allocations [data-live-status][data-state=live]")
    page.evaluate("() => { window.__noReload = true; }")
    assert page.locator("#allocation-table tr[data-allocation-id]").count() == 0

    # Someone else (the API, another tab) allocates: the row appears, then moves on its own.
    alice = principals.for_user(Membership.objects.get(project=project).user)
    [allocation] = in_own_thread(_allocate, alice, project)
    row = f"#allocation-row-{allocation.pk}"
    page.wait_for_selector(f"{row} [data-field=state]:text-is('PROVISIONING')", timeout=10_000)
    page.wait_for_selector(f"{row} [data-field=state]:text-is('ACTIVE')", timeout=15_000)
    assert page.locator(f"{row} .badge-ok").count() == 1
    # The badge flips in place at once; the re-rendered row (no bar once settled) follows.
    page.wait_for_selector(f"{row} progress", state="detached", timeout=5_000)
    assert page.locator(".chip[aria-current=true] .count").inner_text() == "1"
    assert page.evaluate("window.__noReload") is True

    # Away to another tab (the socket closes) and back (htmx restores the tab, the socket reopens).
    page.click("nav.tabs >> text=Members")
    page.wait_for_selector("#members")
    assert page.locator("[data-allocations-live]").count() == 0
    page.go_back()
    page.wait_for_selector(f"{row} [data-field=state]:text-is('ACTIVE')")
    page.wait_for_selector("#allocations [data-live-status][data-state=live]")
    assert page.js_errors == []


def test_an_answer_older_than_the_bar_does_not_move_it_back(portal, page):
    """Progress that arrives while the detail's refresh is in flight stays on the bar when
    that refresh's older answer is swapped in. The browser's refreshes are held
    (``page.route``) and answered when the test says, so the race happens every time."""
    allocation, _ = alices_allocation(enrolled=True)
    Allocation.objects.filter(pk=allocation.pk).update(
        state=Allocation.State.PROVISIONING, step="provision:os_deploy", progress=10
    )
    detail = f"{portal.url}/projects/{allocation.project_id}/allocations/{allocation.pk}/"
    held = []  # the refreshes, each with the answer the server gave when it was asked

    def hold_refreshes(route):
        if route.request.headers.get("hx-request"):
            held.append((route, route.fetch()))
        else:
            route.continue_()

    def refreshes(count: int) -> None:
        for _ in range(200):  # waiting in the browser lets the route handler run
            if len(held) >= count:
                return
            page.wait_for_timeout(50)
        raise AssertionError(f"{count} refreshes awaited; {len(held)} asked for")

    def answer(refresh: int) -> None:
        route, response = held[refresh]
        route.fulfill(response=response)

    page.route(re.compile(rf"^{re.escape(detail)}$"), hold_refreshes)
    sign_in(page, portal.url, "alice")
    page.goto(detail)
    page.wait_for_selector("main [data-live-status][data-state=live]")
    refreshes(1)  # the page asks on opening, as it is in flight: the answer says 10

    Allocation.objects.filter(pk=allocation.pk).update(progress=30)
    in_own_thread(events.allocation_changed, allocation.pk)
    bar = "#allocation-detail progress[data-field=progress]"
    page.wait_for_function(f"() => document.querySelector('{bar}').value === 30")
    answer(0)
    refreshes(2)  # one more, as a message came during the first: held too
    assert page.locator(bar).evaluate("bar => bar.value") == 30
    assert page.locator("#allocation-detail [data-field=progress-text]").inner_text() == "30%"
    answer(1)
    page.wait_for_selector(f"{bar}[value='30']")
    assert page.js_errors == []
