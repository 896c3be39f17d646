"""The embedded default is configured as http://127.0.0.1:8000 and answers as
http://localhost:8000 too (ALLOWED_HOSTS): someone who browses the latter signs in,
sees the portal's live pages, and opens an app on a path-prefix route, which works,
its posts and its WebSockets included (decision 0077), through each data plane."""

from __future__ import annotations

import pytest

from tests.e2e.allocations import active_allocation_on
from tests.e2e.pages import sign_in
from tests.support.concurrency import in_own_thread

pytestmark = pytest.mark.django_db(transaction=True)

# What the app's own script does: a POST and a WebSocket to its route.
USE_THE_APP = """async () => {
    const json = {"Content-Type": "application/json"};
    const posted = await fetch("echo", {method: "POST", body: "{}", headers: json});
    const socket = new WebSocket(new URL("ws", location.href).href.replace(/^http/, "ws"));
    const echoed = await new Promise((resolve) => {
        socket.onopen = () => socket.send("hello");
        socket.onmessage = (event) => resolve(event.data);
        socket.onclose = (event) => resolve("closed " + event.code);
    });
    socket.close();
    return {posted: posted.status, method: posted.ok ? (await posted.json()).method : "", echoed};
}"""


@pytest.fixture
def active_allocation(project, owner):
    return active_allocation_on(project, "gpu-localhost-001", owner.username, enrolled=True)


def test_an_app_on_a_path_route_works_when_the_portal_is_browsed_as_localhost(
    page, data_plane, owner, project, launch
):
    instance = in_own_thread(launch)
    assert instance.proxy_routes.get().public_url.startswith(f"http://127.0.0.1:{data_plane.port}/w/")
    owner.set_password("pw")
    owner.save()
    base = f"http://localhost:{data_plane.port}"
    sign_in(page, base, owner.username)

    page.goto(f"{base}/projects/{project.pk}/instances/{instance.pk}/?tab=app")
    page.locator("[data-live-status]", has_text="Live").wait_for(timeout=20_000)
    page.frame_locator("iframe[data-app-frame]").get_by_text("JupyterLab").wait_for(timeout=30_000)
    app = next(frame for frame in page.frames if "/w/" in frame.url)
    assert app.url.startswith(f"{base}/w/{instance.pk}/web/")
    assert app.evaluate(USE_THE_APP) == {"posted": 200, "method": "POST", "echoed": "hello"}
