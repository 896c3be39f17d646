"""A real JupyterLab, started by a real node agent, used through the platform proxy
in headless Chromium: the workload shell's App UI tab embeds it, a notebook runs
``print(6*7)`` over the kernel WebSocket and shows 42, and the Jupyter token (the
proxy's auth bridge injects it upstream) never reaches the browser: not in a page,
a URL, a header, a cookie or a response body the browser saw.

Both route modes: ``path_prefix`` on the portal's origin, and ``subdomain`` where
each app is its own origin under ``*.apps.localhost`` (Chromium resolves every
``*.localhost`` name to the loopback address).

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep a screenshot of each mode.
"""

from __future__ import annotations

import os

import pytest

from apps.runtime import services
from apps.runtime.models import AppInstance
from tests.runtime.agent_fixtures import node_agent, wait_for  # noqa: F401 - the real agent
from tests.runtime.conftest import (  # noqa: F401 - a project with an ACTIVE allocation
    active_allocation,
    allocator,
    flavor,
    jupyterlab,
    nodes,
    ready_tenant,
)

SCREENSHOTS = os.environ.get("GPUAAS_E2E_SCREENSHOTS")
START_TIMEOUT = 120.0  # JupyterLab starts in ~3-5 s on an idle machine; CI machines are not idle
TEXT_TYPES = ("text/", "application/json", "application/javascript")


class BrowserRecord:
    """Everything the browser saw: URLs, headers of both directions, text bodies."""

    def __init__(self, page):
        self.seen: list[str] = []
        page.on("request", self._request)
        page.on("response", self._response)
        page.on("websocket", lambda ws: self.seen.append(ws.url))

    def _request(self, request):
        self.seen += [request.url, repr(request.headers)]

    def _response(self, response):
        headers = response.headers
        self.seen += [response.url, repr(headers)]
        if headers.get("content-type", "").startswith(TEXT_TYPES) and response.status not in (301, 302, 303):
            try:
                self.seen.append(response.text())
            except Exception:  # noqa: BLE001 - a body the browser dropped (navigation away) was never shown
                pass


@pytest.fixture(params=["path_prefix", "subdomain"])
def route_mode(request, settings, portal):
    if request.param == "subdomain":
        # The portal on "localhost", every app on its own "<slug>.apps.localhost" origin.
        settings.ISSUER = portal.url.replace("127.0.0.1", "localhost")
        settings.CSRF_TRUSTED_ORIGINS = [settings.ISSUER]
        settings.APPS_DOMAIN = "apps.localhost"
    return request.param


def launch_jupyterlab(api, allocator, project, allocation) -> AppInstance:  # noqa: F811
    api.force_login(allocator)
    body = {"app": "jupyterlab", "allocation_id": str(allocation.pk)}
    response = api.post(f"/api/v1/projects/{project.pk}/app-instances", body, format="json")
    assert response.status_code == 202, response.content
    instance_id = response.json()["instance_id"]

    def running():
        instance = AppInstance.objects.get(pk=instance_id)
        assert instance.state not in ("failed", "stopped"), instance.state_reason
        return instance if instance.state == "running" else None

    return wait_for(running, timeout=START_TIMEOUT, what="JupyterLab running")


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def test_jupyterlab_embedded_through_the_proxy_runs_a_notebook(
    route_mode, settings, portal, page, api, allocator, project, active_allocation, jupyterlab, node_agent
):
    instance = launch_jupyterlab(api, allocator, project, active_allocation)
    route = instance.proxy_routes.get()
    assert route.mode == route_mode and route.status == "active"
    token = services.runtime_secret(instance, "token")
    assert token and len(token) >= 16
    record = BrowserRecord(page)
    base = settings.ISSUER

    allocator.set_password("pw")
    allocator.save()
    log_in(page, base, allocator.username)
    page.goto(f"{base}/projects/{project.pk}/instances/{instance.pk}/?tab=app")
    frame = page.frame_locator("iframe[data-app-frame]")
    # The launcher minted a session, preflighted the app and sent the frame to it.
    frame.get_by_text("Python 3 (ipykernel)").first.click(timeout=60_000)
    editor = frame.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.click(timeout=30_000)
    page.keyboard.type("print(6*7)")
    page.keyboard.press("Shift+Enter")
    output = frame.locator(".jp-OutputArea-output", has_text="42").first
    output.wait_for(timeout=60_000)
    assert output.inner_text().strip() == "42"

    app_frame = next(f for f in page.frames if "/w/" in f.url)
    assert app_frame.url.startswith(route.public_url.split("/w/")[0])
    if route_mode == "subdomain":
        assert app_frame.url.startswith(f"http://{route.slug}.apps.localhost:")
    if SCREENSHOTS:
        page.screenshot(path=os.path.join(SCREENSHOTS, f"jupyterlab-{route_mode}.png"), full_page=True)

    cookies = page.context.cookies()
    route_cookies = [c for c in cookies if c["name"] == "_gpuaas_route"]
    assert route_cookies and all(c["httpOnly"] for c in route_cookies)
    seen = "\n".join([*record.seen, repr(cookies), page.content(), app_frame.content(), app_frame.url])
    assert token not in seen
    # The page config Jupyter writes into /lab was served, with its token blanked.
    assert '"token": ""' in seen
