"""A hostile app on a path-prefix route (the portal's origin), in headless Chromium,
through each data plane: what a browser would do with its answers, not only what the
proxy sends (``tests/proxy/test_hostile_app.py`` checks the answers themselves)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from apps.proxy import sessions
from tests.e2e.allocations import active_allocation_on
from tests.support.concurrency import in_own_thread
from tests.support.proxy import login_session, open_session, route_url

pytestmark = pytest.mark.django_db(transaction=True)

REGISTER = """async (scope) => {
    try {
        await navigator.serviceWorker.register("sw.js", {scope});
        return "registered";
    } catch (error) {
        return "refused";
    }
}"""


@pytest.fixture
def active_allocation(project, owner):
    return active_allocation_on(project, "gpu-hostile-001", owner.username, enrolled=True)


def signed_in(page, data_plane, owner, launch):
    """A running app, and a browser signed in to the portal with the app opened."""
    instance = in_own_thread(launch)
    session = login_session(owner)
    route_cookie = open_session(data_plane, owner, instance, session=session)
    cookie = {"domain": urlsplit(data_plane.url).hostname, "httpOnly": True}
    route_path = urlsplit(route_url(instance)).path
    page.context.add_cookies(
        [
            {**cookie, "name": "sessionid", "value": session.session_key, "path": "/"},
            {**cookie, "name": sessions.COOKIE, "value": route_cookie, "path": route_path},
        ]
    )
    return instance


def test_an_app_cannot_install_a_service_worker_on_the_portals_origin(page, data_plane, owner, launch):
    instance = signed_in(page, data_plane, owner, launch)
    page.goto(route_url(instance, "page.html"))
    assert page.title() == "an app"
    # Neither for the whole origin (the app offers Service-Worker-Allowed: /) nor for its route.
    assert page.evaluate(REGISTER, "/") == "refused"
    assert page.evaluate(REGISTER, urlsplit(route_url(instance)).path) == "refused"


def test_an_app_cannot_clear_the_portals_cookies(page, data_plane, owner, launch):
    instance = signed_in(page, data_plane, owner, launch)
    page.goto(route_url(instance, "powerful-headers"))
    assert "sessionid" in {cookie["name"] for cookie in page.context.cookies()}
