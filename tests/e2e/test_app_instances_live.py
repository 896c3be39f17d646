"""A project admin launches JupyterLab from the catalog in a real browser and
watches the instance go ``requested`` -> ``starting`` -> ``running`` live over
the project's instance socket, without a reload, then stops it through the page.

The node agent is simulated from the test through the services its API calls
(``claim_tasks``, ``report_task``), in a thread of its own: Playwright's event
loop in the test thread forbids the broadcast's ``async_to_sync``. (A real agent
running JupyterLab is covered by the agent's own tests.)

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep screenshots of the catalog, the
launch form with an inline error and the running instance's page.
"""

from __future__ import annotations

import re

import pytest

from apps.allocations.models import Node
from apps.runtime import agents
from apps.runtime.models import AppInstance
from tests.e2e.allocations import alices_allocation
from tests.e2e.pages import shot, sign_in
from tests.factories import shipped_manifest
from tests.support.catalog import publish
from tests.support.concurrency import in_own_thread

# Records each state the badge shows, on every change of the detail (through
# DevTools, not subject to the CSP).
RECORD_STATES = """() => {
  window.__noReload = true;
  window.__seen = [];
  const sample = () => {
    const badge = document.querySelector('#instance-detail [data-field="state"]');
    const state = badge ? badge.textContent.trim() : null;
    if (state && window.__seen[window.__seen.length - 1] !== state) window.__seen.push(state);
  };
  sample();
  new MutationObserver(sample).observe(document.getElementById('instance-detail'),
    {subtree: true, childList: true, characterData: true, attributes: true});
}"""


@pytest.fixture
def world(db):
    allocation, _ = alices_allocation(enrolled=True)
    for slug, name in (("jupyterlab", "JupyterLab"), ("vllm-openai", "vLLM OpenAI server")):
        publish(slug, name=name, summary=shipped_manifest(slug)["summary"])
    return allocation.project


def _claim(node):
    return [task.pk for task in agents.claim_tasks(node)]


def _report_started(node, task_id):
    agents.report_task(
        node, task_id, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": 41234}]
    )


def test_launch_watch_running_and_stop(world, portal, page):
    project = world
    sign_in(page, portal.url, "alice")

    # The switcher makes Training the current project; then the catalog.
    page.select_option("#project-switcher", str(project.pk))
    page.wait_for_url(f"{portal.url}/projects/{project.pk}/")
    page.click("nav.nav >> text=Apps")
    page.wait_for_url(f"{portal.url}/apps/")
    assert page.locator(".app-card").count() == 2
    assert "launching into Training" in page.locator(".page-header").inner_text()
    shot(page, "catalog")

    page.click(".app-card[data-app=jupyterlab] >> text=JupyterLab")
    page.wait_for_url(f"{portal.url}/apps/jupyterlab/")
    shot(page, "app-detail")
    page.click("text=Launch in Training")
    page.wait_for_url(re.compile(rf"/projects/{project.pk}/apps/jupyterlab/launch/"))
    assert page.input_value("input[name=param_default_path]") == "/lab"
    assert page.input_value("input[name=param_idle_minutes]") == "60"
    assert "gpu-000 · h100-8x · 8 of 8 GPUs free" in page.locator("select[name=allocation]").inner_text()

    # The manifest's pattern works as the browser's own check.
    valid = "() => document.querySelector('input[name=param_default_path]').checkValidity()"
    page.fill("input[name=param_default_path]", "no-slash")
    assert page.evaluate(valid) is False
    page.fill("input[name=param_default_path]", "/lab/tree")
    assert page.evaluate(valid) is True

    # A value the service refuses: its message shows on the field (the browser's own
    # check of min/max is switched off for this, through DevTools).
    page.fill("input[name=name]", "nb-1")
    page.fill("input[name=param_idle_minutes]", "2")
    page.evaluate("() => { document.getElementById('launch-form').noValidate = true; }")
    page.click("#launch-form button[type=submit]")
    page.wait_for_selector("[data-parameter=idle_minutes] .field-error >> text=Must be at least 5.")
    assert AppInstance.objects.count() == 0
    assert page.input_value("input[name=name]") == "nb-1"
    shot(page, "launch-form-error")

    page.fill("input[name=param_idle_minutes]", "30")
    page.click("#launch-form button[type=submit]")
    page.wait_for_url(re.compile(rf"/projects/{project.pk}/instances/[0-9a-f-]{{36}}/$"))
    instance = AppInstance.objects.get()
    assert instance.name == "nb-1"
    assert instance.parameters == {"default_path": "/lab/tree", "idle_minutes": 30}
    assert page.locator("#instance-detail [data-field=state]").inner_text() == "requested"
    assert "Launching JupyterLab 1.0.0 as nb-1 on gpu-000." in page.locator("#messages").inner_text()
    page.wait_for_selector("[data-live-status][data-state=live]")

    # The agent picks the task up, then reports it started: watched live, no reload.
    page.evaluate(RECORD_STATES)
    node = Node.objects.get(hostname="gpu-000")
    [task_id] = in_own_thread(_claim, node)
    page.wait_for_selector("#instance-detail [data-field=state]:text-is('starting')", timeout=10_000)
    in_own_thread(_report_started, node, task_id)
    page.wait_for_selector("#instance-detail [data-field=state]:text-is('running')", timeout=10_000)
    assert page.evaluate("window.__noReload") is True
    assert page.evaluate("window.__seen") == ["requested", "starting", "running"]
    assert page.locator("#instance-detail .badge-ok[data-field=state]").count() == 1
    # The launch's success message became the next step.
    page.wait_for_selector("#messages [data-next-step-message] >> text=nb-1 is running → Open JupyterLab")
    # The refreshed body brings the actions; the workload shell's other tabs hold the
    # timeline and where to reach the app.
    page.wait_for_selector("#instance-detail [data-action=stop]")
    assert page.locator("#instance-detail [data-action]").evaluate_all(
        "(els) => els.map(e => e.dataset.action)"
    ) == [
        "stop",
        "delete",
    ]
    shot(page, "instance-running")
    page.click("[data-tab=events]")
    page.wait_for_selector("#instance-detail .timeline-item:first-child >> text=running")
    page.click("[data-tab=access]")
    route_url = f"{portal.url}/w/{instance.pk}/web/"
    page.wait_for_selector(f"#instance-detail [data-open-endpoint=web] >> text={route_url}")
    page.click("[data-tab=overview]")

    # A gateway in front of the portal answering the launcher with an HTML error page:
    # the launcher says what the portal answered (not a JSON parse error) and offers a retry.
    page.route(
        f"**/api/v1/workloads/{instance.pk}/ui/session",
        lambda route: route.fulfill(status=502, content_type="text/html", body="<html>Bad gateway</html>"),
    )
    page.goto(f"{portal.url}/projects/{project.pk}/instances/{instance.pk}/open/web/")
    page.wait_for_selector("[data-launcher-error]:visible")
    assert (
        page.inner_text("[data-launcher-message]")
        == "The app did not open: The portal answered 502 Bad Gateway."
    )
    assert page.is_visible("[data-launcher-retry]")
    # The console logs the two attempts' 502s, and nothing else.
    assert set(page.js_errors) == {
        "Failed to load resource: the server responded with a status of 502 (Bad Gateway)"
    }
    page.js_errors.clear()
    page.unroute(f"**/api/v1/workloads/{instance.pk}/ui/session")
    page.goto(f"{portal.url}/projects/{project.pk}/instances/{instance.pk}/")

    # Stop, confirmed on its own page.
    page.click("#instance-detail a[data-action=stop]")
    page.wait_for_url(f"{portal.url}/projects/{project.pk}/instances/{instance.pk}/stop/")
    page.click("button:has-text('Stop instance')")
    page.wait_for_url(f"{portal.url}/projects/{project.pk}/instances/{instance.pk}/")
    assert page.locator("#instance-detail [data-field=state]").inner_text() == "stopping"
    assert "nb-1 is stopping" in page.locator("#messages").inner_text()
    instance.refresh_from_db()
    assert instance.state == "stopping"

    # The list shows it too, with its badge.
    page.click("text=App instances")
    page.wait_for_selector(f"#instance-row-{instance.pk} [data-field=state]:text-is('stopping')")
    page.wait_for_selector("[data-live-status][data-state=live]")
    shot(page, "instances")
    assert page.js_errors == []
