"""What a hostile app (or a hostile page of it) can do through the data plane, and
what stops it: no service worker, nothing that reaches beyond the app, redirects kept
on the route, the bridged secret masked whatever the content type, and bounds on what
an app can make the proxy hold (each watched with the proxy's memory).

These run on the ASGI plane; the nginx plane gets the same in its Lua rewrite (issue
16), and then joins the parametrization."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.runtime.services import runtime_secret
from tests.proxy.conftest import (
    browser,
    everything_seen,
    handshake,
    open_session,
    peak_memory_growth,
    route_url,
    ws_url,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.parametrize("data_plane", ["asgi"], indirect=True),
]
MEGABYTE = 1024 * 1024


def test_an_app_cannot_register_a_service_worker(data_plane, launch, owner):
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        script = client.get(route_url(instance, "sw.js"), headers={"Service-Worker": "script"})
        plain = client.get(route_url(instance, "sw.js"))
    assert script.status_code == 403 and "cannot register service workers" in script.text
    assert plain.status_code == 200  # the same file fetched as a file is served


def test_headers_that_reach_beyond_the_app_are_dropped(data_plane, launch, owner):
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "reach"))
    assert response.status_code == 200
    assert "service-worker-allowed" not in response.headers and "clear-site-data" not in response.headers


@pytest.mark.parametrize(
    "location",
    ["//evil.example/login", "/\\evil.example/login", "\\\\evil.example/login", "/\t/evil.example/login"],
)
def test_a_redirect_cannot_send_the_browser_to_another_host(data_plane, launch, owner, location):
    """Browsers read these as ``//evil.example``: an open redirect through the route's
    origin (the portal's, on a path-prefix route). They stay paths on that origin."""
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "escape"), params={"to": location})
    assert response.status_code == 302
    assert response.headers["location"] == "/evil.example/login"


def test_a_redirect_to_another_site_goes_through(data_plane, launch, owner):
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "escape"), params={"to": "https://idp.example/authorize"})
    assert response.headers["location"] == "https://idp.example/authorize"


@pytest.mark.parametrize("content_type", ["image/png", "application/octet-stream", "font/woff2"])
def test_the_secret_is_masked_whatever_the_content_type(data_plane, launch, owner, content_type):
    instance = launch()
    secret = runtime_secret(instance, "token")
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "binary-token"), params={"type": content_type})
    assert response.status_code == 200 and b"x" * len(secret) in response.content
    assert secret not in everything_seen(response)


def test_a_compressed_bomb_is_refused_and_never_inflated(data_plane, launch, owner):
    instance = launch()
    answers = []

    def fetch():
        with browser(data_plane, open_session(data_plane, owner, instance)) as client:
            answers.append(client.get(route_url(instance, "bomb"), headers={"Accept-Encoding": "gzip"}))

    growth = peak_memory_growth(data_plane, fetch)
    assert answers[0].status_code == 502 and "cannot be shown" in answers[0].text
    assert growth < 64 * MEGABYTE  # 250 KB of gzip inflates to 256 MB


def test_an_app_flooding_response_headers_gets_a_502(data_plane, launch, owner):
    instance = launch()
    answers = []

    def fetch():
        with browser(data_plane, open_session(data_plane, owner, instance)) as client:
            answers.append(client.get(route_url(instance, "header-flood"), params={"n": 60_000}))
            answers.append(client.get(route_url(instance, "header-flood"), params={"n": 20}))

    growth = peak_memory_growth(data_plane, fetch)
    flooded, fine = answers
    assert flooded.status_code == 502 and not any(name.startswith("x-flood") for name in flooded.headers)
    assert fine.status_code == 200 and fine.headers["x-flood-19"] == "v" * 16
    assert growth < 64 * MEGABYTE


def test_an_oversized_websocket_message_from_the_app_closes_the_socket(data_plane, launch, owner):
    instance = launch()
    options = handshake(data_plane, open_session(data_plane, owner, instance))
    closed, url = {}, ws_url(instance, "echo")

    async def exchange():
        async with connect(url, max_size=None, **options) as socket:
            await socket.send("big:1024")
            assert len(await socket.recv()) == 1024  # an ordinary message passes
            await socket.send(f"big:{256 * MEGABYTE}")
            try:
                await asyncio.wait_for(socket.recv(), timeout=60)
            except ConnectionClosed as exc:
                closed["code"] = exc.rcvd.code if exc.rcvd else None

    growth = peak_memory_growth(data_plane, lambda: asyncio.run(exchange()))
    assert closed["code"] in (1009, 1011)  # message too big, or the app's side ended
    assert growth < 128 * MEGABYTE


@pytest.mark.parametrize("encoded", ["a%23b", "a%3Fb", "a%2Fb"])
def test_a_websocket_path_keeps_its_encoding_upstream(data_plane, launch, owner, encoded):
    instance = launch()
    options = handshake(data_plane, open_session(data_plane, owner, instance))

    url = ws_url(instance, f"{encoded}/{uuid.uuid4().hex}")

    async def path() -> str:
        async with connect(url, **options) as ws:
            await ws.send("path")
            return await ws.recv()

    assert f"/{encoded}/" in asyncio.run(path())
