"""Releasing and launching say what they do, clicked through in Chromium.

Release confirm listing apps: a project admin allocates a node (the pipeline runs in
a real Celery worker thread), watches it become ready (the success message turns
into the next step; the status card never shows ``ACTIVE`` beside Abort), runs an
app on it, and releases it: the confirm page lists the app, refuses without the
typed hostname, releases with it, and the app's events say why it was deleted.

Launch form refusing full nodes: a node full of an 8-GPU server is marked and
cannot be picked; the Launch button says why and the page offers to stop an
instance or allocate another node; stopping the server frees the node.

The node agent is played from the test through the services its API calls, in a
thread of its own (Playwright's event loop forbids the broadcast in this one).

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep screenshots of the refused release
and of the launch form over a full node.
"""

from __future__ import annotations

import re

import pytest

from apps.allocations.models import Allocation, Node
from apps.networking import services as networking
from apps.runtime import agents, services
from apps.runtime.models import AgentTask, AppInstance
from apps.storage import services as storage
from apps.tenancy import principal as principals
from apps.tenancy import quotas
from apps.tenancy.models import Membership
from tests.e2e.allocations import alices_allocation
from tests.e2e.pages import shot, sign_in
from tests.factories import FlavorFactory, NodeFactory, ProjectFactory, TenantFactory
from tests.support.catalog import publish
from tests.support.concurrency import in_own_thread
from tests.support.members import member

# Records, on every change of the detail, the badge and whether an Abort button shows
# beside it (through DevTools, not subject to the CSP).
RECORD_STATUS_CARD = """() => {
  window.__noReload = true;
  window.__cards = [];
  const sample = () => {
    const badge = document.querySelector('#allocation-detail [data-field="state"]');
    const abort = Array.from(document.querySelectorAll('#allocation-detail a.btn-danger'))
      .some(a => a.textContent.trim() === 'Abort');
    const entry = badge ? badge.textContent.trim() + (abort ? ' +abort' : '') : null;
    if (entry && window.__cards[window.__cards.length - 1] !== entry) window.__cards.push(entry);
  };
  sample();
  new MutationObserver(sample).observe(document.getElementById('allocation-detail'),
    {subtree: true, childList: true, characterData: true});
}"""


def _launch(user, project, allocation, slug: str, name: str, parameters: dict | None = None):
    principal = principals.for_user(user)
    return services.launch(
        principal, project, app_slug=slug, allocation_id=allocation.pk, name=name, parameters=parameters
    ).instance


def _agent_does(node, action: str) -> bool:
    """The agent claims the node's pending task of ``action`` and reports it done."""
    for task in agents.claim_tasks(node):
        if task.action == action:
            agents.report_task(
                node, task.pk, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": 9}]
            )
            return True
    return False


def _agent_finishes(page, node, action: str) -> None:
    """Waits (on the page's clock) until the platform asks the agent for ``action``."""
    for _ in range(100):
        if in_own_thread(_agent_does, node, action):
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"no {action} task for {node.hostname}")


@pytest.fixture
def fleet(db):
    tenant = TenantFactory(tenant_id="acme", name="Acme")
    project = ProjectFactory(tenant=tenant, project_id="training", name="Training")
    networking.load_pool(prefix="vrf", count=2, first_vni=50001, first_vlan=1000)
    networking.assign_tenant_network(tenant)
    storage.provision_tenant_storage(tenant)
    quotas.set_quota(tenant, {"gpus": 16, "nodes": 8})
    NodeFactory(hostname="gpu-000", flavor=FlavorFactory(name="h100-8x"))
    publish("jupyterlab", name="JupyterLab")
    member("project_admin", project=project, username="alice")
    return project


def test_release_confirm_listing_apps(fleet, worker, portal, page):
    project = fleet
    base = f"{portal.url}/projects/{project.pk}"
    sign_in(page, portal.url, "alice")

    # Allocate; the page follows it to ACTIVE without a reload.
    page.goto(f"{base}/allocations/new/")
    page.click("#allocation-submit button[type=submit]")
    page.wait_for_url(re.compile(rf"{re.escape(base)}/allocations/[0-9a-f-]{{36}}/$"))
    allocation = Allocation.objects.get()
    assert "Allocating gpu-000: provisioning has started." in page.locator("#messages").inner_text()
    page.evaluate(RECORD_STATUS_CARD)
    page.wait_for_selector("#allocation-detail [data-field=state]:text-is('ACTIVE')", timeout=20_000)
    # The success message turned into the next step, and the card never mixed two states.
    page.wait_for_selector("#messages [data-next-step-message]")
    assert page.locator("#messages").inner_text().strip().startswith("gpu-000 is ready → Launch an app")
    assert page.locator("#messages a:has-text('Launch an app')").get_attribute("href") == "/apps/"
    cards = page.evaluate("window.__cards")
    assert "ACTIVE +abort" not in cards, cards
    assert page.evaluate("window.__noReload") is True
    # Release steps only once a release starts.
    assert page.locator("#allocation-detail tr[data-step^='release:']").count() == 0

    # An app runs on the node (its agent enrolled from this machine).
    Node.objects.filter(pk=allocation.node_id).update(credential_hash="0" * 64, agent_address="127.0.0.1")
    alice = Membership.objects.get(project=project).user
    instance = in_own_thread(_launch, alice, project, allocation, "jupyterlab", "nb-1")
    _agent_finishes(page, allocation.node, AgentTask.Action.START)
    instance.refresh_from_db()
    assert instance.state == AppInstance.State.RUNNING

    # The confirm page lists it and wants the hostname typed.
    page.click("#allocation-detail a.btn-danger:has-text('Release')")
    page.wait_for_url(f"{base}/allocations/{allocation.pk}/release/")
    ends = page.locator(".release-ends")
    assert ends.locator("h2").inner_text() == "These app instances will be deleted"
    assert ends.locator(f"li[data-instance-id='{instance.pk}'] a").inner_text() == "nb-1"
    assert "running" in ends.inner_text()
    assert "Apps are running on gpu-000" in page.locator("#release-typing-why").inner_text()

    page.click("button:has-text('Release node')")
    page.wait_for_selector(
        "[role=alert]:has-text('Type gpu-000 to release it with the apps that run on it.')"
    )
    assert page.locator(".release-ends li[data-instance-id]").count() == 1  # still says what it ends
    shot(page, "release-refused-without-hostname")
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    # The refusal is a 400 page, which the console notes; nothing else went wrong.
    assert page.js_errors == [
        "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    ]
    page.js_errors.clear()

    page.fill("input[name=hostname]", "gpu-000")
    page.click("button:has-text('Release node')")
    page.wait_for_url(f"{base}/allocations/{allocation.pk}/")
    assert "Releasing gpu-000" in page.locator("#messages").inner_text()
    page.wait_for_selector("#allocation-detail tr[data-step='release:drain']")

    # The drain asks the agent to remove the app; then the node goes back.
    _agent_finishes(page, allocation.node, AgentTask.Action.REMOVE)
    page.wait_for_selector("#allocation-detail [data-field=state]:text-is('RELEASED')", timeout=20_000)
    page.wait_for_selector("#messages :text('gpu-000 went back to the pool')")
    assert page.locator("#allocation-detail a.btn-danger").count() == 0

    # The instance's events say why it went.
    page.goto(f"{base}/instances/{instance.pk}/?tab=events")
    page.wait_for_selector(".timeline-item >> text=deleted because allocation gpu-000 was released by alice")
    instance.refresh_from_db()
    assert instance.state == AppInstance.State.DELETED
    assert page.js_errors == []


@pytest.fixture
def full_node(db):
    allocation, alice = alices_allocation(enrolled=True)
    publish("vllm-openai", name="vLLM OpenAI server")
    return allocation.project, allocation, alice


def test_launch_form_refusing_full_nodes(full_node, portal, page):
    project, allocation, alice = full_node
    big = in_own_thread(_launch, alice, project, allocation, "vllm-openai", "big-1", {"tensor_parallel": 8})
    in_own_thread(_agent_does, allocation.node, AgentTask.Action.START)
    sign_in(page, portal.url, "alice")
    launch_url = f"{portal.url}/projects/{project.pk}/apps/vllm-openai/launch/"

    page.goto(launch_url)
    picked = page.locator(f"select[name=allocation] option[value='{allocation.pk}']")
    assert picked.inner_text() == "gpu-000 · h100-8x · 0 of 8 GPUs free · full"
    assert picked.is_disabled()
    button = page.locator("#launch-form button[type=submit]")
    assert button.is_disabled()
    assert button.inner_text() == "Launch vLLM OpenAI server: no node has 1 free GPU"
    blocked = page.locator("#launch-blocked")
    assert "Every node of Training is full: vLLM OpenAI server needs 1 free GPU." in blocked.inner_text()
    assert blocked.locator("a[data-next=allocate]").inner_text() == "allocate another node"
    shot(page, "launch-every-node-full")

    # What to do: stop an instance, from the list the link opens.
    blocked.locator("a[data-next=stop]").click()
    page.wait_for_url(re.compile(r"/instances/\?state=running$"))
    page.click(f"#instance-row-{big.pk} a:has-text('big-1')")
    page.wait_for_url(re.compile(rf"/instances/{big.pk}/$"))
    page.click("#instance-detail a[data-action=stop]")
    page.click("button:has-text('Stop instance')")
    page.wait_for_url(re.compile(rf"/instances/{big.pk}/$"))
    in_own_thread(_agent_does, allocation.node, AgentTask.Action.STOP)
    page.wait_for_selector("#instance-detail [data-field=state]:text-is('stopped')", timeout=10_000)
    # A stopped instance says what it holds of its node.
    note = page.locator("#instance-detail [data-field=gpus]")
    note.wait_for()
    assert "Stopped, it holds none of gpu-000's GPUs: other apps may take its 8 GPUs." in note.inner_text()
    page.wait_for_selector("#messages [data-next-step-message] >> text=big-1 is stopped → Launch an app")
    shot(page, "instance-stopped")

    # The node has room again: offered, and the button is on.
    page.goto(launch_url)
    picked = page.locator(f"select[name=allocation] option[value='{allocation.pk}']")
    assert picked.inner_text() == "gpu-000 · h100-8x · 8 of 8 GPUs free"
    assert not picked.is_disabled()
    assert button.is_enabled()
    assert button.inner_text() == "Launch vLLM OpenAI server"
    assert page.locator("#launch-blocked").count() == 0
    assert page.js_errors == []
