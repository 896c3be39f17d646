"""A real JupyterLab, started by a real node agent, used through the platform proxy
in headless Chromium: the workload shell's App UI tab embeds it, a notebook runs
``print(6*7)`` over the kernel WebSocket and shows 42, and the Jupyter token (the
proxy's auth bridge injects it upstream) never reaches the browser: not in a page,
a URL, a header, a cookie or a response body the browser saw.

Both data planes: the portal's own ASGI proxy, and nginx running docker/nginx.conf
in front of the whole portal as in production (its Lua authorizes, nginx moves the
bytes and masks the token, the portal relays the kernel's WebSocket). Both route
modes: ``path_prefix`` on the portal's origin; ``subdomain`` where each app is its
own origin. Embedding a subdomain app needs the apps domain on the
portal's site (its SameSite cookies are not sent in a cross-site frame), as in
production: ``portal.example.com`` and ``*.apps.example.com``, which the browser
resolves to loopback (``--host-resolver-rules``). Under ``*.localhost`` (which
Chromium resolves to loopback by itself) every name is a site of its own, so the
platform opens the app in its own tab instead, and the test does the same.

Set ``GPUAAS_E2E_SCREENSHOTS=/some/dir`` to keep a screenshot of each mode.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from apps.allocations.models import Node
from apps.runtime import selectors
from apps.runtime.models import AppInstance
from tests.e2e.allocations import active_allocation_on
from tests.e2e.pages import sign_in
from tests.support.concurrency import in_own_thread
from tests.support.instances import START_TIMEOUT
from tests.support.members import member
from tests.support.nginx import Nginx
from tests.support.processes import wait_for

SCREENSHOTS = os.environ.get("GPUAAS_E2E_SCREENSHOTS")
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
            # A body the browser dropped (it navigated away) was never shown.
            with contextlib.suppress(Exception):
                self.seen.append(response.text())


@pytest.fixture
def allocator(project):
    return member("project_admin", project=project)


@pytest.fixture
def active_allocation(project, allocator):
    return active_allocation_on(project, "gpu-e2e-001", allocator.username, enrolled=False)


# variant: (data plane, route mode, portal host, apps domain, how the shell shows the app)
VARIANTS = {
    "path_prefix": ("asgi", "path_prefix", "127.0.0.1", "", "embedded"),
    "path_prefix_nginx": ("nginx", "path_prefix", "127.0.0.1", "", "embedded"),
    "subdomain_same_site": ("asgi", "subdomain", "portal.example.com", "apps.example.com", "embedded"),
    "subdomain_localhost": ("asgi", "subdomain", "localhost", "apps.localhost", "link_out"),
}
NGINX_SECRET = "e2e-nginx-asks-the-portal"


@pytest.fixture(params=list(VARIANTS))
def variant(request, settings, portal):
    plane, mode, host, apps_domain, ui_mode = VARIANTS[request.param]
    front = portal
    if plane == "nginx":
        settings.PROXY_AUTH_SECRET = NGINX_SECRET
        front = Nginx(f"127.0.0.1:{portal.port}", NGINX_SECRET, apps_domain=apps_domain).start()
    settings.ISSUER = front.url.replace("127.0.0.1", host)
    settings.CSRF_TRUSTED_ORIGINS = [settings.ISSUER]
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, ".example.com"]
    settings.APPS_DOMAIN = apps_domain
    yield plane, mode, ui_mode, front
    if front is not portal:
        front.stop()


def launch_jupyterlab(api, allocator, project, allocation) -> AppInstance:
    """Through the API, in a thread of its own (``in_own_thread``)."""
    node = allocation.node
    wait_for(
        lambda: Node.objects.filter(pk=node.pk).exclude(credential_hash="").exists(), what="agent enrolled"
    )

    def launch():
        api.force_login(allocator)
        body = {"app": "jupyterlab", "allocation_id": str(allocation.pk)}
        return api.post(f"/api/v1/projects/{project.pk}/app-instances", body, format="json")

    response = in_own_thread(launch)
    assert response.status_code == 202, response.content
    instance_id = response.json()["instance_id"]

    def running():
        instance = AppInstance.objects.get(pk=instance_id)
        assert instance.state not in ("failed", "stopped"), instance.state_reason
        return instance if instance.state == "running" else None

    return wait_for(running, timeout=START_TIMEOUT, what="JupyterLab running")


def test_jupyterlab_through_the_proxy_runs_a_notebook(
    variant,
    settings,
    portal,
    page,
    api,
    allocator,
    project,
    active_allocation,
    jupyterlab,
    node_agent,
):
    plane, route_mode, ui_mode, front = variant
    instance = launch_jupyterlab(api, allocator, project, active_allocation)
    route = instance.proxy_routes.get()
    assert (route.mode, route.status, instance.ui_mode) == (route_mode, "active", ui_mode)
    token = selectors.runtime_secret(instance, "token")
    assert token
    assert len(token) >= 16
    base = settings.ISSUER

    allocator.set_password("pw")
    allocator.save()
    sign_in(page, base, allocator.username)
    page.goto(f"{base}/projects/{project.pk}/instances/{instance.pk}/?tab=app")
    if ui_mode == "embedded":
        record = BrowserRecord(page)
        app = page.frame_locator("iframe[data-app-frame]")
    else:
        with page.context.expect_page() as opened:
            page.click("[data-open-app]")
        app_page = opened.value
        record = BrowserRecord(app_page)
        app = app_page
    # The launcher minted a session, preflighted the app where it could and sent the browser there.
    app.get_by_text("Python 3 (ipykernel)").first.click(timeout=60_000)
    # A cell run before the kernel is connected is dropped: wait until it is idle.
    app.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=60_000)
    app.locator(".jp-Notebook .jp-Cell .cm-content").first.click(timeout=30_000)
    keyboard = page.keyboard if ui_mode == "embedded" else app_page.keyboard
    keyboard.type("print(6*7)")
    keyboard.press("Shift+Enter")
    output = app.locator(".jp-OutputArea-output", has_text="42").first
    output.wait_for(timeout=60_000)
    assert output.inner_text().strip() == "42"

    if plane == "nginx":  # and the app's page came through it (its access log is written each second)
        wait_for(lambda: f"GET /w/{instance.pk}/web/lab" in front.output, timeout=10, what="nginx's log line")
    app_frame = next(f for p in page.context.pages for f in p.frames if "/w/" in f.url and "/lab" in f.url)
    origin = route.public_url.rstrip("/") if route_mode == "subdomain" else base
    assert app_frame.url.startswith(f"{origin}/w/{instance.pk}/web/lab")
    if SCREENSHOTS:
        shown = page if ui_mode == "embedded" else app_page
        shown.screenshot(path=os.path.join(SCREENSHOTS, f"jupyterlab-{plane}-{route_mode}-{ui_mode}.png"))

    cookies = page.context.cookies()
    route_cookies = [c for c in cookies if c["name"] == "_gpuaas_route"]
    assert route_cookies
    assert all(c["httpOnly"] and c["sameSite"] == "Lax" for c in route_cookies)
    seen = "\n".join([*record.seen, repr(cookies), app_frame.content(), app_frame.url])
    assert token not in seen
    # The page config Jupyter writes into /lab was served, with its token masked.
    assert f'"token": "{"x" * len(token)}"' in seen
