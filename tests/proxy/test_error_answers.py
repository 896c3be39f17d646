"""The proxy's own answers on both data planes: the API's error envelope and codes
(CONTRACT.md) with the request's correlation id for scripts and API clients, and for
a browser navigating a page that shows the same code and id."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apps.core.logging import CorrelationIdFilter
from apps.runtime import services as runtime
from apps.tenancy import principal as principals
from tests.support.catalog import publish
from tests.support.processes import free_port, wait_for
from tests.support.proxy import (
    NAVIGATION,
    browser,
    handshake,
    open_session,
    proxied_manifest,
    route_url,
    ws_url,
)

pytestmark = pytest.mark.django_db(transaction=True)

ENVELOPE = {"code", "message", "correlation_id", "details"}


def envelope(response) -> dict:
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == ENVELOPE
    # The id in the body is the one the response carries (and the portal logged).
    assert error["correlation_id"] == response.headers["x-correlation-id"]
    return error


def shown(page) -> tuple[str, str]:
    """The code and the reference an HTML page shows."""
    assert page.headers["content-type"].startswith("text/html")
    found = re.search(
        r"Error <code>([a-z_]+)</code> &middot; reference <code>([A-Za-z0-9._-]+)</code>", page.text
    )
    assert found, page.text
    return found.group(1), found.group(2)


def test_a_refusal_is_the_apis_envelope_for_scripts_and_a_page_with_the_same_code_for_browsers(
    data_plane, launch
):
    instance = launch()
    with browser(data_plane) as client:
        page = client.get(route_url(instance, "echo"))
        script = client.get(route_url(instance, "echo"), headers={"Accept": "*/*"})
        api = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
    assert page.status_code == script.status_code == api.status_code == 401
    assert shown(page) == ("unauthenticated", page.headers["x-correlation-id"])
    assert "Open this app from the portal" in page.text
    for answer in (script, api):
        error = envelope(answer)
        assert error["code"] == "unauthenticated"
        assert "Open the app again" in error["message"]
    # Each request its own id.
    assert len({page.headers["x-correlation-id"], script.headers["x-correlation-id"]}) == 2


def test_the_codes_are_the_apis(data_plane, launch, owner, project, active_allocation):
    gone, stopped = launch(port=free_port()), launch()
    runtime.change(principals.for_user(owner), stopped, "stop")
    app = publish("starting", proxied_manifest())
    starting = runtime.launch(  # last: launch() reports every task of the node done
        principals.for_user(owner), project, app_slug=app.slug, allocation_id=active_allocation.pk
    ).instance
    answers = {}
    for name, instance in (("gone", gone), ("starting", starting), ("stopped", stopped)):
        with browser(data_plane, open_session(data_plane, owner, instance)) as client:
            answers[name] = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
    with browser(data_plane) as client:
        answers["unknown"] = client.get(
            f"{data_plane.url}/w/{uuid.uuid4()}/web/", headers={"Accept": "application/json"}
        )
    seen = {name: (answer.status_code, envelope(answer)["code"]) for name, answer in answers.items()}
    assert seen == {
        "gone": (502, "bad_gateway"),
        "starting": (503, "unavailable"),
        "stopped": (503, "unavailable"),
        "unknown": (404, "not_found"),
    }
    for name in ("starting", "stopped"):
        assert int(answers[name].headers["retry-after"]) > 0, name


def test_a_refused_websocket_gets_the_envelope(data_plane, launch, owner):
    instance = launch(limits={"per_instance": 1})
    cookie = open_session(data_plane, owner, instance)
    url = ws_url(instance, "ws")

    async def refused(cookie):
        with pytest.raises(InvalidStatus) as refusal:
            async with connect(url, **handshake(data_plane, cookie)):
                pass
        return refusal.value.response

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie)) as held:
            await held.send("held")
            await held.recv()
            return await refused(cookie), await refused(None)

    busy, anonymous = asyncio.run(scenario())
    assert busy.status_code == 429
    assert int(busy.headers["Retry-After"]) > 0
    assert anonymous.status_code == 401
    for response, code in ((busy, "rate_limited"), (anonymous, "unauthenticated")):
        error = json.loads(response.body)["error"]
        assert set(error) == ENVELOPE
        assert error["code"] == code
        assert error["correlation_id"] == response.headers["X-Correlation-ID"]


def test_the_callers_correlation_id_is_kept_and_logged_with_the_refusal(proxy_server, launch, caplog):
    """On the ASGI plane the browser's own id is taken, as the API takes it, and the
    request's access log line carries the id its page shows. (nginx asks for its pages
    itself, with headers of its own: docker/nginx/portal.conf.)"""
    instance = launch()
    given = "trace-" + uuid.uuid4().hex
    correlation_filter = CorrelationIdFilter()  # what the console handler has (settings.LOGGING)
    caplog.handler.addFilter(correlation_filter)

    def logged():
        return [r for r in caplog.records if r.name == "gpuaas.proxy.access"]

    try:
        with caplog.at_level(logging.INFO, logger="gpuaas.proxy.access"), browser(proxy_server) as client:
            page = client.get(route_url(instance, "echo"), headers={"X-Correlation-ID": given})
            malformed = client.get(route_url(instance, "echo"), headers={"X-Correlation-ID": "bad id!"})
            # The server writes its access line once the answer has gone out.
            wait_for(lambda: len(logged()) >= 2, timeout=10, what="both access lines")
    finally:
        caplog.handler.removeFilter(correlation_filter)
    assert page.status_code == 401
    assert page.headers["x-correlation-id"] == given
    assert shown(page) == ("unauthenticated", given)
    assert malformed.headers["x-correlation-id"] != "bad id!"
    assert [r.correlation_id for r in logged()] == [given, malformed.headers["x-correlation-id"]]


def test_browsers_navigating_get_a_page_and_fetches_get_the_envelope(data_plane, launch, owner):
    instance = launch(port=free_port())
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"), headers={"Accept": NAVIGATION})
        fetched = client.get(route_url(instance, "echo"), headers={"Accept": "*/*"})
    assert page.status_code == fetched.status_code == 502
    assert shown(page) == ("bad_gateway", page.headers["x-correlation-id"])
    assert f'/instances/{instance.pk}/">Back to the portal</a>' in page.text
    assert envelope(fetched)["code"] == "bad_gateway"
