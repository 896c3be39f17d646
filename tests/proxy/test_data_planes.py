"""What both data planes do with the same requests: the portal's ASGI proxy under
uvicorn (``asgi``) and nginx running docker/nginx.conf in front of it (``nginx``,
production's), with the app in its own process and PostgreSQL and Redis as in
production. Where they differ on purpose (docs/decisions/0016 and 0017) a test says
so in a per-plane expectation; what only one of them does is tested in
``test_dataplane_*.py`` (the ASGI proxy) and ``test_nginx.py``."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.test import Client
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from apps.proxy import access, sessions
from apps.runtime import agents
from apps.runtime import services as runtime
from apps.runtime.selectors import runtime_secret
from apps.tenancy import principal as principals
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership
from tests.support.catalog import publish
from tests.support.members import member
from tests.support.processes import free_port
from tests.support.proxy import (
    APPS_DOMAIN,
    browser,
    eventually,
    everything_seen,
    handshake,
    login_session,
    memory_growth,
    open_session,
    proxied_manifest,
    refused_status,
    route_url,
    ws_url,
)

pytestmark = pytest.mark.django_db(transaction=True)


def link_out_manifest() -> dict:
    manifest = proxied_manifest()
    manifest["ui"]["mode_supported"] = ["link_out"]
    return manifest


def app_cookies(kind: str, path: str) -> list[str]:
    """The ``Set-Cookie`` headers the browser gets for the test app's ``/cookies`` on a
    route whose root is ``path``. Neither plane lets a cookie out of the route or onto
    another host (an empty Domain is ignored by browsers: host-only), so the portal's
    session cannot be planted. The ASGI proxy refuses a cookie with the platform's name
    and gives a cookie without a Path the route's; nginx cannot refuse it and confines
    it to the route instead (0016), and leaves a cookie without a Path to the browser,
    which scopes it to the page's directory, inside the route."""
    if kind == "asgi":
        return [
            f"app=1; HttpOnly; Path={path}",
            f"rooted=2; SameSite=Lax; Path={path}",
            f"plain=3; Path={path}",
        ]
    return [
        f"app=1; Domain=; Path={path}; HttpOnly",
        f"rooted=2; Path={path}; SameSite=Lax",
        "plain=3",
        f"sessionid=planted; Path={path}",
    ]


# --- the bridged secret -------------------------------------------------------------------


def test_bridge_header_reaches_the_app_and_its_token_never_reaches_the_browser(data_plane, launch, owner):
    instance = launch()
    secret = runtime_secret(instance, "token")
    assert secret
    masked = f'"token": "{"x" * len(secret)}"'  # as long as the token (decision 0023)
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        echo = client.get(route_url(instance, "echo"), headers={"Authorization": "Bearer platform-token"})
        lab = client.get(route_url(instance, "lab"), headers={"Accept-Encoding": "gzip"})
        seen = [echo, lab]
        if data_plane.kind == "asgi":
            # A body the app compressed though asked for identity is not inflated (it could
            # be a bomb) but refused; a response header that carries the secret is dropped.
            compressed = client.get(route_url(instance, "lab-gzip"), headers={"Accept-Encoding": "gzip"})
            leaky_headers = client.get(route_url(instance, "headers"))
            assert compressed.status_code == 502
            assert "cannot be shown" in compressed.text
            assert "x-echo-token" not in leaky_headers.headers
            assert leaky_headers.headers["x-fine"] == "ok"
            seen += [compressed, leaky_headers]

    # The app got "Authorization: token <secret>" and was asked not to compress.
    assert echo.json()["digests"]["authorization"] == hashlib.sha256(f"token {secret}".encode()).hexdigest()
    assert dict(echo.json()["headers"])["accept-encoding"] == "identity"
    # JupyterLab's page config reaches the browser with its token masked, though the
    # token straddles the app's small writes, and the page keeps its length.
    assert lab.status_code == 200
    assert masked in lab.text
    assert "JupyterLab" in lab.text
    assert lab.headers["content-length"] == str(len(lab.content))
    for response in seen:
        assert secret not in everything_seen(response)


def test_a_part_of_a_page_comes_masked_and_never_holds_a_piece_of_the_token(data_plane, launch, owner):
    """A part of a page could hold a piece of the token, which no mask recognizes, and
    script on the route can ask for any part: on a route with a secret the app is asked
    for the part widened by the token's length, which is masked and cut down to the
    part asked for. A download resumes and a video seeks; the token stays out."""
    instance = launch()
    secret = runtime_secret(instance, "token")
    unbridged = proxied_manifest()
    del unbridged["endpoints"][0]["proxy"]["auth_bridge"]
    without_secret = launch(manifest=unbridged)
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        whole = client.get(route_url(instance, "lab")).content
        at = whole.index(b"x" * len(secret))
        size = len(whole)

        def part(asked: str):
            return client.get(route_url(instance, "lab"), headers={"Range": f"bytes={asked}"})

        parts = {
            (at + 4, at + 19): part(f"{at + 4}-{at + 19}"),  # inside the token
            (at - 3, at + 2): part(f"{at - 3}-{at + 2}"),  # across its start
            (at + len(secret) - 2, size - 1): part(f"{at + len(secret) - 2}-"),  # from its end on
            (size - 20, size - 1): part("-20"),  # the page's end
        }
        past_the_end = part(f"{size + 5}-")
        several, backwards = part("0-1, 5-6"), part("9-3")
        # An app that ignores Range sends the whole body; one that sends another part
        # than it was asked for is not relayed.
        ignored = client.get(route_url(instance, "echo"), headers={"Range": "bytes=100-109"})
        wrong = client.get(route_url(instance, "wrong-part"), headers={"Range": "bytes=90-95"})
    with browser(data_plane, open_session(data_plane, owner, without_secret)) as client:
        kept = client.get(route_url(without_secret, "lab"), headers={"Range": "bytes=0-14"})
    for (first, last), response in parts.items():
        assert response.status_code == 206, (first, last)
        assert response.headers["content-range"] == f"bytes {first}-{last}/{size}"
        assert response.content == whole[first : last + 1]
        assert response.headers["content-length"] == str(last - first + 1)
        # Every byte of the part that held a piece of the token arrives masked. (Looking
        # for short pieces of a random token in the part would find "py" in "JupyterLab".)
        held = range(max(first, at), min(last, at + len(secret) - 1) + 1)
        assert all(response.content[i - first] == ord("x") for i in held)
    assert secret.encode() not in whole
    assert past_the_end.status_code == 416
    assert past_the_end.headers["content-range"] == f"bytes */{size}"
    for response in (several, backwards):  # several parts, or none: the whole page
        assert response.status_code == 200
        assert response.content == whole
    margin = len(secret) - 1
    assert ignored.status_code == 200
    assert dict(ignored.json()["headers"])["range"] == f"bytes={100 - margin}-{109 + margin}"
    assert wrong.status_code == 502
    assert b"WXYZ" not in wrong.content
    assert kept.status_code == 206
    assert kept.text == "<!doctype html>"


# --- request and response headers ---------------------------------------------------------


def test_platform_credentials_hop_by_hop_and_forwarded_headers_stay_behind(data_plane, launch, owner):
    instance = launch()
    cookie = open_session(data_plane, owner, instance)
    sent = {
        "Cookie": f"sessionid=portal; csrftoken=csrf; {sessions.COOKIE}={cookie}; app_pref=dark; _xsrf=x",
        "Authorization": "Bearer platform-token",
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Prefix": "/elsewhere",
        "Forwarded": "for=203.0.113.9",
        "Connection": "keep-alive, x-private",
        "X-Private": "hop",
        "Keep-Alive": "timeout=5",
        "Origin": data_plane.url,
        "X-App-Header": "kept",
        "Accept": "application/vnd.app+json",  # the proxy reads it for its own answers, and passes it on
    }
    if data_plane.kind == "nginx":
        # (uvicorn trusts loopback as its proxy, as it trusts nginx in production, so
        # without nginx a client-sent X-Forwarded-For would name the client.)
        sent["X-Forwarded-For"] = "203.0.113.9"
    response = httpx.get(route_url(instance, "echo?q=1"), headers=sent, trust_env=False)
    assert response.status_code == 200
    echo = response.json()
    seen = dict(echo["headers"])
    endpoint = instance.endpoints.get()
    assert (echo["path"], echo["query"]) == (f"/w/{instance.pk}/web/echo", "q=1")
    assert seen["cookie"] == "app_pref=dark; _xsrf=x"
    assert "Bearer" not in seen["authorization"]
    assert seen["x-forwarded-for"] == "127.0.0.1"
    assert seen["x-forwarded-host"] == data_plane.url.removeprefix("http://")
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-prefix"] == f"/w/{instance.pk}/web"
    assert seen["host"] == f"{endpoint.host}:{endpoint.port}"
    assert seen["origin"] == f"http://{seen['host']}"  # JupyterLab checks Origin against Host
    assert seen["x-app-header"] == "kept"
    assert seen["accept"] == "application/vnd.app+json"
    for dropped in ("keep-alive", "forwarded", "x-real-ip"):
        assert dropped not in seen
    # Only the ASGI proxy drops what the client's Connection header names (nginx passes
    # it on, as it passes on the response headers the app's Connection names: 0016).
    assert ("x-private" in seen) == (data_plane.kind == "nginx")


@pytest.mark.parametrize("base_url_aware", [True, False], ids=["under-the-route", "at-its-root"])
def test_the_app_gets_the_browsers_path_as_sent(data_plane, launch, owner, base_url_aware):
    """An app that knows its base path gets the browser's path unchanged; one that
    does not is served at its root. Either way the path is the raw one, not decoded
    and encoded again (nginx proxies the two cases with different directives)."""
    instance = launch(base_url_aware=base_url_aware)
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        echo = client.get(route_url(instance, "files/a%20b%2Fc.txt?x=%2F"))
    root = urlsplit(route_url(instance)).path if base_url_aware else "/"
    assert echo.json()["raw_path"] == root + "files/a%20b%2Fc.txt"
    assert echo.json()["query"] == "x=%2F"
    assert "x-forwarded-prefix" in dict(echo.json()["headers"])


def test_hop_by_hop_response_headers_are_dropped_and_framing_follows_the_route(data_plane, launch, owner):
    embedded, separate = launch(), launch(manifest=link_out_manifest())
    pages = {}
    for instance in (embedded, separate):
        with browser(data_plane, open_session(data_plane, owner, instance)) as client:
            pages[instance.pk] = [client.get(route_url(instance, path)) for path in ("headers", "nocsp")]
    # The ASGI proxy merges the app's CSP; nginx adds its own frame-ancestors header, so
    # the stricter of the two applies (0016). Only the ASGI proxy drops the response
    # headers that the app's Connection header names. An embedded path-prefix route is
    # framed by the portal, which shares its origin under whichever name it was browsed
    # as ('self').
    app_csp = {"asgi": "default-src 'self'; ", "nginx": ""}[data_plane.kind]

    headers, no_csp = pages[embedded.pk]
    assert "keep-alive" not in headers.headers
    assert headers.headers["x-fine"] == "ok"
    if data_plane.kind == "asgi":
        assert "x-hop" not in headers.headers
        assert headers.headers["content-security-policy"] == f"{app_csp}frame-ancestors 'self'"
    assert "x-frame-options" not in headers.headers  # the CSP governs: the portal may frame it
    assert no_csp.headers["content-security-policy"] == "frame-ancestors 'self'"

    headers, no_csp = pages[separate.pk]
    if data_plane.kind == "asgi":
        assert headers.headers["content-security-policy"] == f"{app_csp}frame-ancestors 'none'"
    assert headers.headers["x-frame-options"] == "DENY"
    assert no_csp.headers["content-security-policy"] == "frame-ancestors 'none'"


# --- redirects and cookies ----------------------------------------------------------------


def test_redirects_lead_back_onto_the_route(data_plane, launch, owner):
    aware = launch()  # serves under /w/{iid}/web/ itself
    unaware = launch(base_url_aware=False)  # serves at /, the proxy maps the prefix
    locations = {}
    for instance in (aware, unaware):
        with browser(data_plane, open_session(data_plane, owner, instance)) as client:
            locations[instance.pk] = {
                to: client.get(route_url(instance, f"redirect?to={to}")).headers["location"]
                for to in ("absolute", "relative", "root", "elsewhere")
            }
    assert locations[aware.pk] == {
        "absolute": f"/w/{aware.pk}/web/landing?from=redirect",
        "relative": f"/w/{aware.pk}/web/landing",
        "root": f"/w/{aware.pk}/web/",  # outside its route: its root instead (test_hostile_app.py)
        "elsewhere": "https://example.org/docs",
    }
    assert locations[unaware.pk] == {
        "absolute": f"/w/{unaware.pk}/web/landing?from=redirect",
        "relative": f"/w/{unaware.pk}/web/landing",
        "root": f"/w/{unaware.pk}/web/landing",
        "elsewhere": "https://example.org/docs",
    }


def test_app_cookies_are_host_only_scoped_to_the_route_and_cannot_touch_the_portals(
    data_plane, launch, owner
):
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        response = client.get(route_url(instance, "cookies"))
    assert response.headers.get_list("set-cookie") == app_cookies(data_plane.kind, f"/w/{instance.pk}/web/")


def test_subdomain_routes_rewrite_onto_their_own_origin(settings, data_plane, launch, owner):
    settings.APPS_DOMAIN = APPS_DOMAIN
    instance = launch(base_url_aware=False)
    route = instance.proxy_routes.get()
    assert route.mode == "subdomain"
    host = f"{route.slug}.{APPS_DOMAIN}:{data_plane.port}"
    cookie = open_session(data_plane, owner, instance, host=host)
    with browser(data_plane, cookie, base_url=data_plane.url) as client:
        headers = {"Host": host}
        echo = client.get("/echo", headers=headers)
        static = client.get("/static/app.js", headers=headers)  # the app's, not the portal's
        # A route's path without its slash is redirected on the portal's host; here it is the app's.
        app_path = client.get("/w/notes/today", headers=headers)
        absolute = client.get("/sub/redirect?to=absolute", headers=headers)
        cookies = client.get("/cookies", headers=headers)
        portal_host = client.get("/echo")  # the same path on the portal's host is the portal's
    assert echo.status_code == 200
    assert echo.json()["path"] == "/echo"
    assert static.json()["path"] == "/static/app.js"
    assert app_path.status_code == 200
    assert app_path.json()["path"] == "/w/notes/today"
    assert dict(echo.json()["headers"])["x-forwarded-host"] == host
    assert "x-forwarded-prefix" not in dict(echo.json()["headers"])
    assert absolute.headers["location"] == "/sub/landing?from=redirect"
    assert cookies.headers.get_list("set-cookie") == app_cookies(data_plane.kind, "/")  # its own origin
    assert portal_host.status_code == 404
    assert "x-forwarded-host" not in portal_host.text


# --- streaming ----------------------------------------------------------------------------


GIGABYTE = 1024**3


@contextlib.contextmanager
def streamed(data_plane, owner, instance, path: str) -> Iterator[httpx.Response]:
    """A GET on the route read as it streams, from a browser with a session."""
    with (
        browser(data_plane, open_session(data_plane, owner, instance)) as client,
        client.stream("GET", route_url(instance, path)) as response,
    ):
        yield response


def test_a_gigabyte_streams_up_and_down_with_flat_memory(data_plane, launch, owner):
    instance = launch()
    megabyte = b"u" * (1024 * 1024)
    with (
        memory_growth(data_plane) as growth,
        browser(data_plane, open_session(data_plane, owner, instance)) as client,
    ):
        uploaded = client.post(
            route_url(instance, "upload"), content=(megabyte for _ in range(GIGABYTE // len(megabyte)))
        )
        received = 0
        with client.stream("GET", route_url(instance, f"download?n={GIGABYTE}")) as response:
            assert response.headers["content-length"] == str(GIGABYTE)
            for chunk in response.iter_raw():
                received += len(chunk)
    assert uploaded.json() == {"bytes": GIGABYTE}
    assert received == GIGABYTE
    # None of the client, the portal and nginx held the gigabyte.
    assert growth[0] < 150 * 1024 * 1024


def test_a_browser_that_leaves_closes_the_apps_connection(data_plane, launch, owner, upstream):
    instance = launch()
    stream_id = uuid.uuid4().hex
    with streamed(data_plane, owner, instance, f"slow?id={stream_id}") as response:
        assert next(response.iter_raw()) == b"waiting\n"
    assert eventually(lambda: upstream.get("disconnected", id=stream_id)["disconnected"])


def test_an_app_that_dies_mid_response_breaks_the_browsers_connection(data_plane, launch, owner):
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(route_url(instance, "die"))
        assert client.get(route_url(instance, "echo")).status_code == 200


def test_server_sent_events_arrive_one_by_one(data_plane, launch, owner, upstream):
    instance = launch()
    stream_id = uuid.uuid4().hex
    with streamed(data_plane, owner, instance, f"sse?id={stream_id}") as response:
        assert response.headers["content-type"] == "text/event-stream"
        chunks = response.iter_raw()
        assert next(chunks) == b"data: one\n\n"  # while the app still holds back the second event
        upstream.get("release", id=stream_id)
        assert next(chunks) == b"data: two\n\n"


# --- WebSockets ---------------------------------------------------------------------------


def test_websocket_messages_subprotocol_and_close_codes_pass_through(data_plane, launch, owner, upstream):
    instance = launch()
    secret = runtime_secret(instance, "token")
    cookie = open_session(data_plane, owner, instance)
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    first_url, second_url = ws_url(instance, f"ws?id={first}"), ws_url(instance, f"ws?id={second}")

    async def scenario():
        options = handshake(data_plane, cookie)
        async with connect(first_url, subprotocols=["echo.v1", "echo.v2"], **options) as ws:
            assert ws.subprotocol == "echo.v2"  # the app's choice
            await ws.send("hello")
            assert await ws.recv() == "hello"
            await ws.send(b"\x00\x01binary")
            assert await ws.recv() == b"\x00\x01binary"
            await ws.send("headers")
            seen = json.loads(await ws.recv())
            await ws.send("close:4001:app says bye")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            app_close = (ws.close_code, ws.close_reason)
        async with connect(second_url, **options) as ws:
            await ws.send("ping")
            assert await ws.recv() == "ping"
            await ws.close(4002, "browser says bye")
        return seen, app_close

    seen, app_close = asyncio.run(scenario())
    assert app_close == (4001, "app says bye")
    assert eventually(lambda: upstream.get("ws-closed", id=second)) == {
        "code": 4002,
        "reason": "browser says bye",
    }
    # What the app saw: its own origin, the bridge and no platform cookie. The token
    # the app echoed back is masked before the browser gets the message (through
    # nginx too: the portal relays WebSockets, decision 0021).
    assert seen["origin"] == f"http://{seen['host']}"
    assert sessions.COOKIE not in seen.get("cookie", "")
    assert seen["authorization"] == "token " + "x" * len(secret)
    assert secret not in json.dumps(seen)


@pytest.mark.parametrize("ending", ["stop", "logout", "revoke", "suspend"])
def test_an_open_websocket_is_closed_when_access_ends(
    data_plane, launch, owner, project, platform_admin, ending
):
    instance = launch()
    user = owner if ending != "revoke" else member("project_admin", project=project)
    session = login_session(user)
    cookie = open_session(data_plane, user, instance, session=session)

    def end_access():
        if ending == "stop":
            runtime.change(principals.for_user(owner), instance, "stop")
        elif ending == "logout":
            sessions.end_platform_session(session.session_key, user.pk)  # what logging out does
        elif ending == "suspend":
            tenancy.suspend_tenant(principals.for_user(platform_admin), project.tenant, "unpaid")
        else:
            Membership.objects.filter(user=user).delete()

    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie)) as ws:
            await ws.send("still here")
            assert await ws.recv() == "still here"
            await database_sync_to_async(end_access)()
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), timeout=20)
            return ws.close_code

    assert asyncio.run(scenario()) == 4403


@pytest.mark.parametrize("who", ["anonymous", "other_tenant", "foreign_origin", "revoked"])
def test_handshakes_outside_access_are_refused_before_reaching_the_app(
    data_plane, launch, owner, project, other_tenant_project, who
):
    instance = launch()
    cookie, origin = None, "route"
    if who == "other_tenant":
        stranger = member("tenant_admin", tenant=other_tenant_project.tenant)
        cookie = open_session(data_plane, stranger, instance)
    if who == "foreign_origin":
        cookie, origin = open_session(data_plane, owner, instance), "http://evil.example"
    if who == "revoked":
        colleague = member("project_admin", project=project)
        cookie = open_session(data_plane, colleague, instance)
        Membership.objects.filter(user=colleague).delete()
    status = refused_status(ws_url(instance, "ws"), **handshake(data_plane, cookie, origin))
    assert status == {"anonymous": 401, "other_tenant": 403, "foreign_origin": 403, "revoked": 403}[who]


def test_a_client_without_origin_is_not_a_browser_and_still_needs_the_cookie(data_plane, launch, owner):
    instance = launch()
    assert refused_status(ws_url(instance, "ws"), **handshake(data_plane, None, origin=None)) == 401
    cookie = open_session(data_plane, owner, instance)
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie, origin=None)) as ws:
            await ws.send("hi")
            return await ws.recv()

    assert asyncio.run(scenario()) == "hi"


def test_websockets_count_against_the_instance_limit(data_plane, launch, owner):
    instance = launch(limits={"per_instance": 1})
    cookie = open_session(data_plane, owner, instance)
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie)) as ws:
            await ws.send("held")
            await ws.recv()
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, **handshake(data_plane, cookie)):
                    pass
            return refused.value.response

    refused = asyncio.run(scenario())
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0


def test_an_app_that_refuses_the_websocket_refuses_the_browser(data_plane, launch, owner):
    instance = launch()
    cookie = open_session(data_plane, owner, instance)
    assert refused_status(ws_url(instance, "refuse"), **handshake(data_plane, cookie)) == 403


# --- limits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data_plane", "counted_in"),
    [("asgi", "redis"), ("asgi", "process"), ("nginx", "nginx")],
    indirect=["data_plane"],
)
def test_connections_over_the_instance_limit_get_429_with_retry_after(
    settings, data_plane, launch, owner, counted_in
):
    # The ASGI proxy counts in the cache's Redis, or in its process when the cache is
    # local (the embedded default); nginx in its shared memory (0018).
    if counted_in == "process":
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    instance = launch(limits={"per_instance": 1})
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        with client.stream("GET", route_url(instance, f"slow?id={uuid.uuid4().hex}")) as held:
            chunks = held.iter_raw()  # kept: a dropped iterator closes the connection
            next(chunks)
            refused = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) > 0
        assert refused.json()["error"]["code"] == "rate_limited"
        # The held connection is given back once the browser leaves.
        assert eventually(lambda: client.get(route_url(instance, "echo")).status_code == 200)


def test_the_user_limit_counts_one_persons_connections(data_plane, launch, owner, project):
    instance = launch(limits={"per_user": 1})
    colleague = member("project_admin", project=project)
    with (
        browser(data_plane, open_session(data_plane, owner, instance)) as mine,
        browser(data_plane, open_session(data_plane, colleague, instance)) as theirs,
        mine.stream("GET", route_url(instance, f"slow?id={uuid.uuid4().hex}")) as held,
    ):
        chunks = held.iter_raw()  # kept: a dropped iterator closes the connection
        next(chunks)
        busy = mine.get(route_url(instance, "echo"))
        assert busy.status_code == 429
        assert "Too many connections" in busy.text
        assert theirs.get(route_url(instance, "echo")).status_code == 200


# --- who gets in ----------------------------------------------------------------------------


def test_without_a_session_the_browser_is_sent_back_to_the_portal(data_plane, launch):
    instance = launch()
    with browser(data_plane) as client, browser(data_plane, "forged") as forger:
        page = client.get(route_url(instance, "echo"))
        forged = forger.get(route_url(instance, "echo"))
    assert page.status_code == 401
    assert "Open this app from the portal" in page.text
    # On the portal's own name, whichever the browser used (the route shares its origin).
    back = f'href="/projects/{instance.project_id}/instances/{instance.pk}/">Back to the portal</a>'
    assert back in page.text
    assert forged.status_code == 401


def test_another_tenants_user_is_denied(data_plane, launch, other_tenant_project):
    instance = launch()
    stranger = member("tenant_admin", tenant=other_tenant_project.tenant)
    with browser(data_plane, open_session(data_plane, stranger, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 403
    assert "Access denied" in page.text


def test_a_refused_request_with_a_body_leaves_the_next_ones_alone(data_plane, launch, owner):
    """A refusal's page is asked of the portal without the browser's body: nginx must not
    say there is one, or the portal would read the next request on that kept-alive
    connection (anyone's grant or page) as the rest of it and fail it."""
    instance = launch()
    body = {"content": '{"type": "notebook"}', "headers": {"Accept": "application/json"}}
    statuses = []
    with (
        browser(data_plane) as anonymous,
        browser(data_plane, open_session(data_plane, owner, instance)) as own,
    ):
        for _ in range(3):
            statuses.append(anonymous.post(route_url(instance, "echo"), **body).status_code)
            statuses.append(own.post(route_url(instance, "echo"), **body).status_code)
    assert statuses == [401, 200] * 3


def test_a_cookie_for_one_route_does_not_open_another(data_plane, launch, owner):
    first, second = launch(), launch()
    with browser(data_plane, open_session(data_plane, owner, first)) as client:
        assert client.get(route_url(first, "echo")).status_code == 200
        assert client.get(route_url(second, "echo")).status_code == 401


def test_revoked_access_and_logout_stop_requests(data_plane, launch, owner, project):
    # The ASGI proxy stops the very next request; nginx within its grants' cache time (0017).
    settled = (lambda check: check()) if data_plane.kind == "asgi" else eventually
    instance = launch()
    colleague = member("project_admin", project=project)
    session = login_session(owner)
    with (
        browser(data_plane, open_session(data_plane, owner, instance, session=session)) as mine,
        browser(data_plane, open_session(data_plane, colleague, instance)) as theirs,
    ):
        assert mine.get(route_url(instance, "echo")).status_code == 200
        assert theirs.get(route_url(instance, "echo")).status_code == 200
        Membership.objects.filter(user=colleague).delete()
        sessions.end_platform_session(session.session_key, owner.pk)  # what logging out does
        assert settled(lambda: theirs.get(route_url(instance, "echo")).status_code == 403)
        assert settled(lambda: mine.get(route_url(instance, "echo")).status_code == 401)


def test_a_suspended_tenants_requests_are_refused_until_it_is_reactivated(
    data_plane, launch, owner, project, platform_admin
):
    # The ASGI proxy goes by it at the very next request; nginx within its grants' cache time.
    settled = (lambda check: check()) if data_plane.kind == "asgi" else eventually
    instance = launch()
    operator = principals.for_user(platform_admin)
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        tenancy.suspend_tenant(operator, project.tenant, "unpaid")
        assert settled(lambda: client.get(route_url(instance, "echo")).status_code == 403)
        tenancy.reactivate_tenant(operator, project.tenant)
        assert settled(lambda: client.get(route_url(instance, "echo")).status_code == 200)


@pytest.mark.parametrize("ending", ["logout", "login_rotates_the_key", "password_change"])
def test_an_ended_portal_session_stays_ended_when_every_cache_forgets(data_plane, launch, owner, ending):
    """Logout used to live only in the cache: after a restart (the embedded default's
    cache is in process memory) or an evicted key the cookie worked again for hours.
    The decision reads the portal session itself."""
    settled = (lambda check: check()) if data_plane.kind == "asgi" else eventually
    instance = launch()
    session = login_session(owner)
    with browser(data_plane, open_session(data_plane, owner, instance, session=session)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        if ending == "logout":
            portal = Client()
            portal.cookies[settings.SESSION_COOKIE_NAME] = session.session_key
            assert portal.post("/accounts/logout/").status_code in (200, 302)
        elif ending == "login_rotates_the_key":
            session.cycle_key()  # what a new sign-in on that browser does
        else:
            owner.set_password("a-new-password-1234")
            owner.save()
        cache.clear()  # a restarted portal, or Redis that evicted the keys
        access.forget()
        assert settled(lambda: client.get(route_url(instance, "echo")).status_code == 401)


def test_a_stopped_instance_is_not_reached_and_strangers_do_not_learn_its_state(data_plane, launch, owner):
    instance = launch()
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        runtime.change(principals.for_user(owner), instance, "stop")
        if data_plane.kind == "asgi":
            # The stop re-makes the decision at once: the very next request is refused.
            page = client.get(route_url(instance, "echo"))
        else:  # nginx reuses a grant for its cache time (decision 0016)
            page = eventually(lambda: (r := client.get(route_url(instance, "echo"))).status_code == 503 and r)
        assert page.status_code == 503
        assert "The app is not running" in page.text
        assert "the app is stopping" in page.text or "the app is stopped" in page.text
    with browser(data_plane) as stranger:
        assert stranger.get(route_url(instance, "echo")).status_code == 401


def test_a_restarted_app_is_sent_its_new_token_within_the_grant_cache_time(
    data_plane, launch, owner, project, upstream
):
    """Someone who could open the app leaves: it restarts with a new token. The ASGI
    proxy bridges the new token from the very next request (its resolved route follows
    the instance's generation); nginx no later than its grant's cache time after the
    rotation (max-age 2 s plus stale-while-revalidate 1 s, decision 0017)."""
    instance = launch()
    colleague = member("project_admin", project=project)
    old = runtime_secret(instance, "token")

    def bridged(client) -> str | int:
        response = client.get(route_url(instance, "echo"))
        return (
            response.json()["digests"]["authorization"]
            if response.status_code == 200
            else response.status_code
        )

    def digest(token: str) -> str:
        return hashlib.sha256(f"token {token}".encode()).hexdigest()

    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        assert bridged(client) == digest(old)
        Membership.objects.filter(user=colleague).delete()  # committed: the rotation follows
        rotated = time.monotonic()
        instance.refresh_from_db()
        assert instance.state == "starting"
        node = instance.allocation.node
        for task in agents.claim_tasks(node):  # the agent restarts it, at the same address
            endpoint = {"name": "web", "host": upstream.host, "port": upstream.port}
            agents.report_task(node, task.pk, succeeded=True, endpoints=[endpoint])
        new = runtime_secret(instance, "token")
        assert new != old
        if data_plane.kind == "asgi":
            assert bridged(client) == digest(new)
            return
        while True:
            asked = time.monotonic()
            seen = bridged(client)
            if seen == digest(new):
                break
            assert seen != digest(old) or asked - rotated < 3.25, "the old token, past the grant's cache time"
            assert asked - rotated < 10, seen
            time.sleep(0.05)


# --- when the app is not there ----------------------------------------------------------------


def test_a_starting_app_answers_503_with_retry_after(data_plane, owner, project, active_allocation):
    app = publish("starting", proxied_manifest())
    operation = runtime.launch(
        principals.for_user(owner), project, app_slug=app.slug, allocation_id=active_allocation.pk
    )
    instance = operation.instance
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 503
    assert int(page.headers["retry-after"]) > 0
    assert "The app is starting" in page.text
    assert 'http-equiv="refresh"' in page.text


def test_an_app_that_refuses_connections_is_a_502(data_plane, launch, owner):
    instance = launch(port=free_port())
    with browser(data_plane, open_session(data_plane, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
        as_json = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
    assert page.status_code == 502
    assert "The app is not answering" in page.text
    assert f'/instances/{instance.pk}/">Back to the portal</a>' in page.text
    assert as_json.status_code == 502
    assert set(as_json.json()["error"]) == {"code", "message", "correlation_id", "details"}


def test_a_route_without_its_slash_is_redirected_before_access_is_checked(data_plane, launch):
    instance = launch()
    with browser(data_plane) as client:
        bare = client.get(route_url(instance).rstrip("/") + "?x=1")
        unknown = client.get(f"{data_plane.url}/w/{uuid.uuid4()}/web")
    assert bare.status_code == 308
    assert bare.headers["location"].endswith(f"/w/{instance.pk}/web/?x=1")
    assert unknown.status_code == 404


def test_unknown_routes_are_404(data_plane):
    with browser(data_plane) as client:
        missing = client.get(f"{data_plane.url}/w/{uuid.uuid4()}/web/echo")
        assert missing.status_code == 404
        assert "No such app" in missing.text
        assert client.get(f"{data_plane.url}/w/{uuid.uuid4()}/web/").status_code == 404
        assert client.get(f"{data_plane.url}/w/not-a-uuid/web/").status_code == 404
        assert client.get(f"{data_plane.url}/_gpuaas/nothing").status_code == 404
