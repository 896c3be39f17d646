"""What a hostile app, or script it serves to a browser, can do through either data
plane: the portal's ASGI proxy (``asgi``) and nginx in front of it (``nginx``), with the
app in its own process (``tests.support.upstream``). Path-prefix routes put the app on
the portal's origin, so nothing the app answers may reach past its route: no service
worker, no header that clears or widens the portal's state, no redirect off the route,
no bridged token in any body or header, and no answer that makes the proxy hold more
memory than a bounded amount (docs/decisions/0033-what-an-app-may-answer.md)."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urljoin, urlsplit

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.runtime.selectors import runtime_secret
from tests.support.proxy import (
    APPS_DOMAIN,
    browser,
    everything_seen,
    handshake,
    memory_growth,
    open_session,
    refused_status,
    route_url,
    ws_url,
)

pytestmark = pytest.mark.django_db(transaction=True)

MEGABYTE = 1024 * 1024
JSON = {"Accept": "application/json"}
FROM_100 = {"Range": "bytes=100-"}


def assert_bad_gateway(response) -> None:
    """The proxy's own 502 in the error envelope, nothing of the app's answer."""
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "bad_gateway"
    assert set(error) == {"code", "message", "correlation_id", "details"}


# --- service workers and site data --------------------------------------------------------


def test_an_app_cannot_register_a_service_worker(data_plane, launch, owner):
    """A service worker registered on the portal's origin outlives the app and the
    session (it served a fake login page after logout): the browser's fetch of its
    script is refused, whatever the app would answer."""
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        plain = client.get(route_url(instance, "sw.js"))
        registering = client.get(route_url(instance, "sw.js"), headers={"Service-Worker": "script", **JSON})
    assert plain.status_code == 200
    assert "onfetch" in plain.text
    assert registering.status_code == 403
    assert "onfetch" not in registering.text
    assert registering.json()["error"]["code"] == "forbidden"


def test_headers_that_reach_past_the_route_or_carry_the_token_are_dropped(data_plane, launch, owner):
    """``Service-Worker-Allowed`` would let a worker control the whole origin and
    ``Clear-Site-Data`` would wipe the portal's cookies and storage; a header with the
    bridged token in it would hand the token to script on the route."""
    instance = launch()
    secret = runtime_secret(instance, "token")
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "powerful-headers"))
    assert response.status_code == 200
    assert response.headers["x-fine"] == "ok"
    for dropped in ("service-worker-allowed", "clear-site-data", "x-leak"):
        assert dropped not in response.headers
    assert secret not in everything_seen(response)


# --- requests made by script elsewhere ---------------------------------------------------


def test_script_on_another_route_cannot_send_requests_through_this_one(settings, data_plane, launch, owner):
    """Apps' origins are siblings under the apps domain, one site to a browser: it sends a
    route's SameSite=Lax cookie with a request that script on another route (an app the
    same person opened) makes. The bridge would sign it in with the app's token, and the
    app's own origin check (JupyterLab's) would see its own origin, which the proxy hands
    it; so the proxy refuses a request whose Origin is not the route's before the app
    sees it, after a request of the route's own (nginx keeps that grant) as before."""
    settings.APPS_DOMAIN = APPS_DOMAIN
    victim, other = launch(), launch()
    host = f"{victim.proxy_routes.get().slug}.{APPS_DOMAIN}:{data_plane.port}"
    sibling = f"http://{other.proxy_routes.get().slug}.{APPS_DOMAIN}:{data_plane.port}"
    body = '{"type": "notebook"}'  # JupyterLab reads JSON whatever the content type says
    with browser(
        data_plane, open_session(data_plane, owner, victim, host=host), base_url=data_plane.url
    ) as client:
        own = client.post("/echo", headers={"Host": host, "Origin": f"http://{host}"}, content=body)
        answers = {
            origin: client.post(
                "/api/contents/", headers={"Host": host, "Origin": origin, **JSON}, content=body
            )
            for origin in (sibling, data_plane.url, f"http://localhost:{data_plane.port}", "null")
        }
    assert own.status_code == 200
    assert own.json()["method"] == "POST"
    assert dict(own.json()["headers"])["origin"] == f"http://{dict(own.json()['headers'])['host']}"
    for origin, refused in answers.items():
        assert refused.status_code == 403, origin
        assert refused.json()["error"]["code"] == "forbidden"
        assert "another site" in refused.json()["error"]["message"]


def test_a_path_route_is_on_whichever_name_the_portal_was_browsed_as(data_plane, launch, owner):
    """The embedded default is configured as 127.0.0.1 and answers as localhost too
    (ALLOWED_HOSTS); a path-prefix route shares the portal's origin under either name,
    so its page's posts and WebSockets name the one the browser used (decision 0077).
    Any other Origin is still another site's: another host, another of the portal's
    allowed names or scheme, an opaque ``null``, and a host of someone else's that
    resolves to the platform (DNS rebinding), whose page names it as Host and Origin."""
    instance = launch()
    port = data_plane.port
    assert route_url(instance).startswith(f"http://127.0.0.1:{port}/w/")
    as_localhost = f"localhost:{port}"
    path = urlsplit(route_url(instance, "echo")).path
    socket_url = f"ws://{as_localhost}{urlsplit(ws_url(instance, 'ws')).path}"
    cookie = open_session(data_plane, owner, instance)  # the launcher sets it on the host it runs on

    def post(origin: str, host: str = as_localhost):
        return client.post(path, headers={"Host": host, "Origin": origin, **JSON}, content="{}")

    with browser(data_plane, cookie, base_url=data_plane.url) as client:
        own = post(f"http://{as_localhost}")
        refused = {
            origin: post(origin)
            for origin in (
                "http://evil.example",
                f"http://other.localhost:{port}",
                f"https://{as_localhost}",
                "null",
            )
        }
        rebound = post(f"http://evil.example:{port}", host=f"evil.example:{port}")

    async def socket(origin: str):
        async with connect(socket_url, **handshake(data_plane, cookie, origin)) as ws:
            await ws.send("hello")
            return await ws.recv()

    assert own.status_code == 200
    assert own.json()["method"] == "POST"
    assert asyncio.run(socket(f"http://{as_localhost}")) == "hello"
    for origin, answer in [*refused.items(), ("rebound", rebound)]:
        assert answer.status_code == 403, origin
        assert "another site" in answer.json()["error"]["message"]
    assert refused_status(socket_url, **handshake(data_plane, cookie, "http://evil.example")) == 403


# --- redirects ----------------------------------------------------------------------------


def lands(response) -> str:
    """Where the browser goes: the ``Location`` resolved against the page's address."""
    assert response.status_code == 302
    return urljoin(str(response.url), response.headers["location"])


# Locations that leave a path-prefix route: each lands on the route's root instead.
ESCAPES = [
    "//evil.example/login",
    "///evil.example/login",
    "/\\evil.example/login",
    "\\\\evil.example/login",
    "/\t/evil.example/login",
    "https:/evil.example/login",  # https://evil.example/ to a browser on an http page
    "javascript:alert(document.cookie)",
    "http://idp.example/login",  # another host, but not over https
    "/",
    "/admin/",
    "/w/{other}/web/",
    "/w/{iid}/web/../../../api/v1/projects",
    "/w/{iid}/web/%2e%2e/%2E%2e/admin/",
    "../../../logout",
    "{portal}/admin/",
]


@pytest.mark.parametrize("location", ESCAPES)
def test_a_redirect_cannot_leave_a_path_prefix_route(data_plane, launch, owner, location):
    instance, other = launch(), launch()
    location = location.format(iid=instance.pk, other=other.pk, portal=data_plane.url)
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "sub/goto"), params={"location": location})
    assert lands(response) == route_url(instance)


def test_redirects_inside_the_route_and_to_an_identity_provider_are_kept(data_plane, launch, owner):
    """An app moves within its route however it writes the address, and may send the
    browser to another site over https: an identity provider's sign-in page."""
    instance = launch()
    root = route_url(instance)
    kept = {
        "landing?x=1": root + "sub/landing?x=1",
        "../landing": root + "landing",
        f"/w/{instance.pk}/web/tree/": root + "tree/",
        f"{data_plane.url}/w/{instance.pk}/web/lab": root + "lab",
        "https://idp.example/authorize?client_id=lab&state=1": "https://idp.example/authorize?client_id=lab&state=1",
    }
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        landed = {
            location: lands(client.get(route_url(instance, "sub/goto"), params={"location": location}))
            for location in kept
        }
    assert landed == kept


def test_a_redirect_cannot_leave_a_subdomain_route_for_the_platform(settings, data_plane, launch, owner):
    """On its own host an app may redirect anywhere on that host; the portal and other
    apps' hosts are not an identity provider, and get the route's root instead."""
    settings.APPS_DOMAIN = APPS_DOMAIN
    instance = launch(base_url_aware=False)
    route = instance.proxy_routes.get()
    host = f"{route.slug}.{APPS_DOMAIN}:{data_plane.port}"
    origin = f"http://{host}"
    cases = {
        "/anywhere/on/its/host": f"{origin}/anywhere/on/its/host",
        f"{origin}/lab": f"{origin}/lab",
        f"https://{host}/lab": f"{origin}/lab",  # an app that does not know it is behind TLS
        "//evil.example/": f"{origin}/",
        f"{data_plane.url}/admin/": f"{origin}/",
        f"https://another-app.{APPS_DOMAIN}/": f"{origin}/",
        f"https://{APPS_DOMAIN}/": f"{origin}/",
        "https://idp.example/authorize": "https://idp.example/authorize",
    }
    cookie = open_session(data_plane, owner, instance, host=host)
    landed = {}
    with browser(data_plane, cookie, base_url=data_plane.url) as client:
        for location in cases:
            response = client.get("/goto", params={"location": location}, headers={"Host": host})
            assert response.status_code == 302
            landed[location] = urljoin(f"{origin}/goto", response.headers["location"])
    assert landed == cases


# --- the bridged token --------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["image/png", "application/octet-stream", "application/wasm", "font/woff2", "video/mp4"]
)
def test_the_token_is_masked_in_a_body_of_any_type(data_plane, launch, owner, content_type):
    """Script on the route can read any body it fetches, whatever its type."""
    instance = launch()
    secret = runtime_secret(instance, "token")
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "typed"), params={"type": content_type})
    assert response.status_code == 200
    assert secret.encode() not in response.content
    assert b"x" * len(secret) in response.content
    assert response.headers["content-length"] == str(len(response.content))


def test_the_token_is_masked_in_a_websockets_close_reason(data_plane, launch, owner):
    instance = launch()
    secret = runtime_secret(instance, "token")
    cookie = open_session(data_plane, owner, instance)
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie)) as ws:
            await ws.send("close-with-token")
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), timeout=10)
            return ws.close_code, ws.close_reason

    code, reason = asyncio.run(scenario())
    assert code == 4001
    assert reason == "token " + "x" * len(secret)


# --- bounded resources --------------------------------------------------------------------


def test_a_compressed_body_on_a_masked_route_is_refused_not_inflated(data_plane, launch, owner):
    """The proxy asks an app with a token to mask for identity encoding; a compressed
    answer cannot be checked for the token without inflating it (300 KB of gzip are
    300 MB of page), so it is refused."""
    instance = launch()
    with (
        memory_growth(data_plane) as growth,
        browser(data_plane, open_session(data_plane, owner, instance)) as client,
        client.stream("GET", route_url(instance, "bomb?mb=300"), headers=JSON) as response,
    ):
        status = response.status_code
        body = response.read() if status == 502 else b""
    assert status == 502
    assert json.loads(body)["error"]["code"] == "bad_gateway"
    assert growth[0] < 100 * MEGABYTE


@pytest.mark.parametrize("codings", ["gzip", "br", "identity,gzip", "gzip,identity"])
def test_a_compressed_body_on_a_masked_route_is_refused_however_its_coding_is_written(
    data_plane, launch, owner, codings
):
    instance = launch()
    secret = runtime_secret(instance, "token")
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "encoded"), params={"codings": codings}, headers=JSON)
    if data_plane.kind == "nginx" and codings == "gzip,identity":
        # nginx lets Lua clear only the last of an app's Content-Encoding headers: the
        # one left would make a client decode the envelope, so the 502 is empty.
        assert response.status_code == 502
        assert response.content == b""
    else:
        assert_bad_gateway(response)
    assert secret not in everything_seen(response)


def test_a_large_part_of_a_body_on_a_masked_route_keeps_the_proxys_memory_flat(data_plane, launch, owner):
    """Masked and cut chunk by chunk: between two chunks the proxy holds no more than
    the token's length (nginx's C filter once kept a buffer per chunk until the end)."""
    instance = launch()
    with (
        browser(data_plane, open_session(data_plane, owner, instance)) as client,
        memory_growth(data_plane) as growth,
        client.stream("GET", route_url(instance, "big-part?mb=256"), headers=FROM_100) as response,
    ):
        received = sum(len(chunk) for chunk in response.iter_raw())
    assert response.status_code == 206
    assert response.headers["content-range"] == f"bytes 100-{256 * MEGABYTE - 1}/{256 * MEGABYTE}"
    assert received == 256 * MEGABYTE - 100
    assert growth[0] < 48 * MEGABYTE


@pytest.mark.parametrize("answer", ["many-headers?n=60000", f"huge-header?bytes={32 * MEGABYTE}"])
def test_an_answer_with_too_many_or_too_large_headers_is_a_502(data_plane, launch, owner, answer):
    instance = launch()
    with (
        memory_growth(data_plane) as growth,
        browser(data_plane, open_session(data_plane, owner, instance)) as client,
    ):
        response = client.get(route_url(instance, answer), headers=JSON)
        assert client.get(route_url(instance, "echo")).status_code == 200  # the next one is served
    assert_bad_gateway(response)
    assert growth[0] < 32 * MEGABYTE


def closed_after(data_plane, owner, instance, provoke) -> tuple[int, int]:
    """``provoke(ws)`` on a socket to the instance's ``ws`` endpoint, then the proxy's
    close: its close code, and how far the data plane's memory rose meanwhile."""
    cookie = open_session(data_plane, owner, instance)
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, max_size=None, **handshake(data_plane, cookie)) as ws:
            await provoke(ws)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), timeout=30)
            return ws.close_code

    with memory_growth(data_plane) as growth:
        code = asyncio.run(scenario())
    return code, growth[0]


def test_a_websocket_message_from_the_app_is_bounded(data_plane, launch, owner):
    """The proxy does not gather a message larger than its limit: the socket closes
    with 1009 (message too big) and the browser gets nothing of it."""

    async def ask_for_a_big_message(ws):
        await ws.send(f"big:{128 * MEGABYTE}")

    code, growth = closed_after(data_plane, owner, launch(), ask_for_a_big_message)
    assert code == 1009
    assert growth < 64 * MEGABYTE


def test_a_websocket_message_from_the_browser_is_bounded(data_plane, launch, owner, upstream):
    message = bytes(24 * MEGABYTE)

    async def send_a_big_message(ws):
        await ws.send("still here")
        assert await ws.recv() == "still here"
        await ws.send(message)

    code, growth = closed_after(data_plane, owner, launch(), send_a_big_message)
    assert code == 1009
    # The client's own masked copy of the message is in this process too.
    assert growth < 64 * MEGABYTE


# --- bad input ----------------------------------------------------------------------------


def test_a_websocket_path_keeps_its_encoding_upstream(data_plane, launch, owner):
    """``%23`` and ``%3F`` are a ``#`` and a ``?`` inside a path segment, as HTTP sends
    them: decoded, they would cut the path into a fragment or a query."""
    instance = launch()
    cookie = open_session(data_plane, owner, instance)
    url = ws_url(instance, "ws/a%23b%3Fc%2Fd%20e?id=1")

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie)) as ws:
            await ws.send("path")
            return json.loads(await ws.recv())

    seen = asyncio.run(scenario())
    assert seen["raw_path"] == urlsplit(route_url(instance)).path + "ws/a%23b%3Fc%2Fd%20e"
