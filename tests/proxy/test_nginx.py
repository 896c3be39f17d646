"""What only the production data plane does: Debian's nginx running docker/nginx.conf
in front of the portal (uvicorn). nginx moves the bytes, over kept-alive connections
to the apps; the portal answers ``/_gpuaas/auth``, for nginx alone, and nginx keeps
a grant for up to 3 s (docs/decisions/0016, 0017, 0018). What both data planes do
is in ``test_data_planes.py``."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apps.proxy import access, sessions
from apps.proxy.models import ProxyRoute
from apps.runtime import agents
from apps.runtime import services as runtime
from apps.runtime.selectors import runtime_secret
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.support.catalog import publish
from tests.support.members import member
from tests.support.nginx import CONF_DIR
from tests.support.processes import free_port
from tests.support.proxy import (
    AUTH_SECRET,
    browser,
    eventually,
    handshake,
    login_session,
    open_session,
    proxied_manifest,
    refused_status,
    route_url,
    ws_url,
)
from tests.support.servers import reply_json

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections alive

    def do_GET(self):
        reply_json(self, 200, {"host": self.headers["Host"], "path": self.path})

    def log_message(self, *args):
        pass


class CountingApp(ThreadingHTTPServer):
    """An app that answers every GET with the Host and path it got, and counts the
    connections it accepts."""

    daemon_threads = True
    block_on_close = False  # nginx holds kept-alive connections open

    def __init__(self, host: str):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.accepted = 0
        super().__init__((host, 0), _Echo)
        self.host, self.port = host, self.server_address[1]

    def get_request(self):
        request = super().get_request()
        self.accepted += 1
        return request


@pytest.fixture
def counting_app():
    started = []

    def start(host: str = "127.0.0.1") -> CountingApp:
        app = CountingApp(host)
        threading.Thread(target=app.serve_forever, daemon=True).start()
        started.append(app)
        return app

    yield start
    for app in started:
        app.shutdown()
        app.server_close()


@pytest.fixture
def names(monkeypatch):
    """``names[name] = [addresses]``: what the portal's resolver answers for ``name``
    (an empty list: no such name); every other name is resolved as usual."""
    answers: dict[str, list[str]] = {}
    resolve = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            return resolve(host, port, *args, **kwargs)
        if not answers[host]:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port or 0, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port or 0))
            for a in answers[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


def test_the_access_log_has_the_browsers_path_and_status_but_never_the_query(launch, nginx, owner):
    instance = launch()
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        assert client.get(route_url(instance, "echo") + "?token=served-secret").status_code == 200
    with browser(nginx) as anonymous:
        assert anonymous.get(route_url(instance, "echo") + "?token=refused-secret").status_code == 401

    # Written a buffer at a time, at most a second late.
    def lines() -> list[str]:
        return [line for line in nginx.output.splitlines() if f"/w/{instance.pk}/web/echo" in line]

    logged = eventually(lambda: len(lines()) == 2 and lines(), seconds=5)
    path = f'"GET /w/{instance.pk}/web/echo HTTP/1.1"'
    # In either order: each nginx worker writes its own buffer.
    assert sorted(f"{path} 200" in line for line in logged) == [False, True], logged
    assert sorted(f"{path} 401" in line for line in logged) == [False, True], logged
    assert "secret" not in nginx.output


# --- the auth endpoint is nginx's ---------------------------------------------------------------


def test_only_nginx_may_ask_the_auth_endpoint(settings, launch, nginx, proxy_server, owner):
    instance = launch()
    cookie = open_session(nginx, owner, instance)
    asked = {
        "X-Original-Host": nginx.url.removeprefix("http://"),
        "X-Original-URI": f"/w/{instance.pk}/web/echo",
        "Cookie": f"{sessions.COOKIE}={cookie}",
    }

    def ask(base: str, secret: str | None = None) -> httpx.Response:
        headers = asked if secret is None else {**asked, "X-Gpuaas-Auth-Secret": secret}
        return httpx.get(f"{base}/_gpuaas/auth", headers=headers, trust_env=False)

    assert ask(nginx.url, AUTH_SECRET).status_code == 404  # an internal location
    refused = ask(proxy_server.url)
    assert refused.status_code == 403
    assert "x-gpuaas-upstream" not in refused.headers
    assert ask(proxy_server.url, "guess").status_code == 403
    granted = ask(proxy_server.url, AUTH_SECRET)
    assert granted.status_code == 204
    assert granted.headers["x-gpuaas-upstream"]
    settings.PROXY_AUTH_SECRET = ""
    assert ask(proxy_server.url, "").status_code == 403


def test_nginx_keeps_a_grant_at_most_three_seconds_and_never_a_refusal(launch, nginx, proxy_server, owner):
    instance = launch()
    asked = {
        "X-Original-Host": nginx.url.removeprefix("http://"),
        "X-Original-URI": f"/w/{instance.pk}/web/echo",
        "X-Gpuaas-Auth-Secret": AUTH_SECRET,
    }
    cookie = {"Cookie": f"{sessions.COOKIE}={open_session(nginx, owner, instance)}"}
    granted = httpx.get(f"{proxy_server.url}/_gpuaas/auth", headers={**asked, **cookie}, trust_env=False)
    refused = httpx.get(f"{proxy_server.url}/_gpuaas/auth", headers=asked, trust_env=False)
    # Two seconds, and one more while nginx asks again in the background: revocation's bound.
    assert granted.status_code == 204
    assert granted.headers["cache-control"] == "max-age=2, stale-while-revalidate=1"
    assert refused.status_code == 401
    assert "cache-control" not in refused.headers


# --- the grants nginx keeps (nginx/gpuaas.lua) -----------------------------------------------


def test_a_kept_grant_stops_within_three_seconds_of_logout_though_requests_keep_coming(launch, nginx, owner):
    instance = launch()
    session = login_session(owner)
    with browser(nginx, open_session(nginx, owner, instance, session=session)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        sessions.end_platform_session(session.session_key, owner.pk)
        logged_out = time.monotonic()
        # A steady stream, so the grant is served stale and refreshed, never just missed.
        while (status := client.get(route_url(instance, "echo")).status_code) == 200:
            assert time.monotonic() - logged_out < 3.5
            time.sleep(0.05)
        # The refused refresh took the grant away: no request is served from it again.
        assert [status] + [client.get(route_url(instance, "echo")).status_code for _ in range(5)] == [401] * 6


def test_a_refusal_is_not_kept(launch, nginx, owner, project, active_allocation, upstream):
    app = publish("starting", proxied_manifest())
    instance = runtime.launch(
        principals.for_user(owner), project, app_slug=app.slug, allocation_id=active_allocation.pk
    ).instance
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 503
        node = active_allocation.node
        for task in agents.claim_tasks(node):
            endpoints = [{"name": "web", "host": upstream.host, "port": upstream.port}]
            agents.report_task(node, task.pk, succeeded=True, endpoints=endpoints)
        access.forget()
        # At once: the 503 was not kept.
        assert client.get(route_url(instance, "echo")).status_code == 200


def test_a_grant_is_kept_for_the_host_and_port_it_was_asked_for(launch, nginx, owner):
    """On a path_prefix route the Origin of the request's own host and port is the
    route's (decision 0077): what the portal granted a page of the route on one port is
    not granted to it posting to another port nginx answers on, which is another origin."""
    instance = launch()
    own = f"localhost:{nginx.port}"
    path = urlsplit(route_url(instance, "echo")).path
    with browser(nginx, open_session(nginx, owner, instance), base_url=nginx.url) as client:

        def post(host: str) -> int:
            return client.post(
                path, headers={"Host": host, "Origin": f"http://{own}"}, content="{}"
            ).status_code

        assert post(own) == 200
        assert post("localhost:9") == 403


def test_a_websocket_handshake_is_decided_afresh(launch, nginx, project):
    instance = launch()
    colleague = member("project_admin", project=project)
    cookie = open_session(nginx, colleague, instance)
    url = ws_url(instance, "ws")

    async def echo():
        async with connect(url, **handshake(nginx, cookie)) as ws:
            await ws.send("hi")
            return await ws.recv()

    with browser(nginx, cookie) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200  # a grant is kept now
        # Not from the kept grant: the handshake's Origin is checked, and access is asked again.
        assert refused_status(url, **handshake(nginx, cookie, "http://evil.example")) == 403
        assert asyncio.run(echo()) == "hi"
        Membership.objects.filter(user=colleague).delete()
        assert refused_status(url, **handshake(nginx, cookie)) == 403


def test_a_portal_that_does_not_answer_means_nothing_is_proxied(launch, nginx, owner, proxy_server):
    instance = launch()
    cookie = open_session(nginx, owner, instance)
    proxy_server.stop()
    with browser(nginx, cookie) as client:
        response = client.get(route_url(instance, "echo"))
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) > 0
    assert response.json()["error"]["code"] == "unavailable"
    assert response.json()["error"]["correlation_id"] == response.headers["x-correlation-id"]


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path.startswith("/_gpuaas/auth"):
            with self.server.lock:
                self.server.asks += 1
            time.sleep(self.server.delay)
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.portal_port, timeout=10)
        upstream.request("GET", self.path, headers=dict(self.headers))
        answer = upstream.getresponse()
        body = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in (self.server.missing, "content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        upstream.close()

    def log_message(self, *args):
        pass


class RelayedPortal(ThreadingHTTPServer):
    """The web replicas as nginx reaches them through this relay, which counts nginx's
    questions (``asks``) and answers each ``delay`` seconds late; ``missing``: a header
    of the grant this nginx needs that the replicas leave out, as an older release."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, portal_port: int, missing: str | None = None, delay: float = 0.0):
        self.portal_port, self.missing, self.delay = portal_port, missing, delay
        self.asks, self.lock = 0, threading.Lock()
        super().__init__(("127.0.0.1", 0), _Relay)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def relayed_portal(proxy_server):
    """``relayed_portal(**options)``: a RelayedPortal in front of the test portal."""
    started = []

    def start(**options) -> RelayedPortal:
        started.append(RelayedPortal(proxy_server.port, **options))
        return started[-1]

    yield start
    for portal in started:
        portal.shutdown()
        portal.server_close()


def burst(server, cookie: str, url: str, count: int) -> list[int]:
    """``count`` GETs of ``url`` at once, each on a connection of its own: their statuses."""

    def fetch(_):
        with browser(server, cookie) as client:
            return client.get(url).status_code

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(fetch, range(count)))


@pytest.mark.parametrize("missing", [None, "x-gpuaas-user-limit"])
def test_a_grant_without_a_header_nginx_needs_proxies_nothing_and_says_why(
    launch, nginx_with, owner, proxy_server, relayed_portal, missing
):
    portal = relayed_portal(missing=missing)
    server = nginx_with(portal=f"127.0.0.1:{portal.port}")
    instance = launch()
    cookie = open_session(proxy_server, owner, instance, host=f"127.0.0.1:{server.port}")
    with browser(server, cookie) as client:
        response = client.get(route_url(instance, "echo"))
    if missing is None:
        assert response.status_code == 200
        assert response.json()["path"].endswith("/echo")
    else:
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "unavailable"
        assert f"the portal's grant has no {missing}" in server.output


def test_a_burst_of_requests_with_no_grant_asks_the_portal_once_a_worker(
    launch, nginx_with, owner, proxy_server, relayed_portal
):
    # A page's scripts, styles and fonts come at once, after the grant has lapsed.
    portal = relayed_portal(delay=0.5)
    server = nginx_with(portal=f"127.0.0.1:{portal.port}")
    instance = launch()
    cookie = open_session(proxy_server, owner, instance, host=f"127.0.0.1:{server.port}")
    assert burst(server, cookie, route_url(instance, "echo"), 24) == [200] * 24
    # Counted once they have served: nginx's master listens before it has forked them,
    # and on a busy CI host the count was 0.
    workers = len(psutil.Process(server.process.pid).children())
    assert 1 <= portal.asks <= workers < 24


def test_a_burst_of_requests_that_the_portal_refuses_is_refused_every_one(launch, nginx_with, relayed_portal):
    # Only a grant is shared: a waiting request that gets none asks for itself.
    portal = relayed_portal(delay=0.3)
    server = nginx_with(portal=f"127.0.0.1:{portal.port}")
    assert burst(server, "not-a-route-session", route_url(launch(), "echo"), 8) == [401] * 8


def test_a_grant_kept_before_a_reload_in_another_layout_is_asked_again(tmp_path, launch, nginx_with, owner):
    conf_dir = tmp_path / "nginx"
    shutil.copytree(CONF_DIR, conf_dir)
    lua = conf_dir / "gpuaas.lua"
    current = lua.read_text()
    # A release that stored two of the grant's headers the other way round: consistent
    # in itself, but its kept grants, read by this one, would swap them.
    previous = current
    swapped = [('"x-gpuaas-forwarded-prefix"', '"x-gpuaas-frame-ancestors"'), ('"g_forwarded"', '"g_frame"')]
    for one, other in swapped:
        previous = previous.replace(one, "\0").replace(other, one).replace("\0", other)
    assert previous != current
    lua.write_text(previous)
    server = nginx_with(conf_dir=conf_dir)
    instance = launch()
    cookie = open_session(server, owner, instance)
    with browser(server, cookie) as client:
        before = client.get(route_url(instance, "echo"))
        kept = time.monotonic()
        lua.write_text(current)
        server.reload()
        after = client.get(route_url(instance, "echo"))
    # The second request came while the first one's grant was still fresh (2 s).
    assert time.monotonic() - kept < 2.0, "too slow to tell: the kept grant had expired"
    for response in (before, after):
        assert response.status_code == 200
        assert dict(response.json()["headers"])["x-forwarded-prefix"] == f"/w/{instance.pk}/web"
        assert response.headers["content-security-policy"] == "frame-ancestors 'self'"


# --- connections to the apps -------------------------------------------------------------------


def test_connections_to_an_app_are_kept_alive(launch, nginx, owner, counting_app):
    app = counting_app()
    instance = launch(host=app.host, port=app.port)
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        for _ in range(20):
            assert client.get(route_url(instance, "page")).status_code == 200
    assert app.accepted <= 2  # one per nginx worker at most, not one per request


def test_an_ipv6_app_is_reached_with_its_bracketed_host(launch, nginx, owner, counting_app):
    app = counting_app("::1")  # these machines have an IPv6 loopback
    instance = launch(host="::1", port=app.port)
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        seen = client.get(route_url(instance, "page"))
    assert seen.status_code == 200
    assert seen.json() == {"host": f"[::1]:{app.port}", "path": f"/w/{instance.pk}/web/page"}


def test_the_route_cookie_is_found_in_any_cookie_header_and_the_app_gets_only_its_own(launch, nginx, owner):
    # HTTP/2 browsers send a Cookie header per cookie; nginx joins them with "; ".
    instance = launch()
    cookie = open_session(nginx, owner, instance)
    sent = [
        ("Cookie", "app_pref=dark; sessionid=portal"),
        ("Cookie", f"csrftoken=csrf;  {sessions.COOKIE}={cookie}"),
        ("Cookie", "_xsrf=x"),
    ]
    response = httpx.get(route_url(instance, "echo"), headers=sent, trust_env=False)
    assert response.status_code == 200
    assert dict(response.json()["headers"])["cookie"] == "app_pref=dark; _xsrf=x"
    # A route cookie alone sends the app no Cookie header at all.
    alone = httpx.get(route_url(instance, "echo"), headers={"Cookie": f"{sessions.COOKIE}={cookie}"})
    assert "cookie" not in dict(alone.json()["headers"])


def test_a_range_past_what_nginx_can_count_gets_the_whole_page_masked(launch, nginx, owner):
    # nginx widens a range by the token's length: a bound it cannot hold, or one the
    # widening would overflow, asks the app for the whole page, masked, as for any range
    # it does not take.
    instance = launch()
    secret = runtime_secret(instance, "token")
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        whole = client.get(route_url(instance, "lab"))
        for asked in ("99999999999999999999-", "0-9223372036854775807", "-9223372036854775807"):
            response = client.get(route_url(instance, "lab"), headers={"Range": f"bytes={asked}"})
            assert response.status_code == 200, asked
            assert response.content == whole.content
    assert secret not in whole.text
    assert "x" * len(secret) in whole.text


def upstream_named(instance, name: str, port: int) -> None:
    """A route whose upstream is a name. An agent can only report its node's own
    address (decision 0024); a name comes from the platform's side (a route to a
    platform service), and the data plane resolves it."""
    ProxyRoute.objects.filter(instance=instance).update(upstream_host=name, upstream_port=port)


def test_an_app_by_name_is_reached_at_its_addresses_in_turn(launch, nginx, owner, counting_app, names):
    app = counting_app()
    name = f"node-{uuid.uuid4().hex[:8]}.test"
    names[name] = ["::1", app.host]  # nothing answers on the first
    instance = launch()
    upstream_named(instance, name, app.port)
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        seen = client.get(route_url(instance, "page"))
    assert seen.status_code == 200
    assert seen.json()["host"] == f"{name}:{app.port}"


def test_an_app_whose_name_does_not_resolve_is_a_502(launch, nginx, owner, names):
    name = f"gone-{uuid.uuid4().hex[:8]}.test"
    names[name] = []
    instance = launch()
    upstream_named(instance, name, 8888)
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 502
    assert "address cannot be resolved" in page.text


def test_a_bearer_passthrough_route_sends_the_browsers_authorization(launch, nginx, owner):
    manifest = proxied_manifest(auth="bearer_passthrough")
    del manifest["endpoints"][0]["proxy"]["auth_bridge"]
    manifest["ui"]["mode_supported"] = ["link_out"]  # the gateway cannot start such an app's auth
    instance = launch(manifest=manifest)
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        echo = client.get(route_url(instance, "echo"), headers={"Authorization": "Bearer mine"})
        without = client.get(route_url(instance, "echo"))
    assert echo.json()["digests"]["authorization"] == hashlib.sha256(b"Bearer mine").hexdigest()
    assert "authorization" not in dict(without.json()["headers"])


def test_a_route_cookie_sent_alone_reaches_no_app_and_a_lookalike_is_not_one(launch, nginx, owner):
    instance = launch()
    cookie = open_session(nginx, owner, instance)

    def echo(cookies: str) -> httpx.Response:
        return httpx.get(route_url(instance, "echo"), headers={"Cookie": cookies}, trust_env=False)

    alone = echo(f"{sessions.COOKIE}={cookie}")
    assert alone.status_code == 200
    assert "cookie" not in dict(alone.json()["headers"])
    assert echo(f"x{sessions.COOKIE}={cookie}").status_code == 401
    kept = echo(f"{sessions.COOKIE}={cookie};a=b")
    assert kept.status_code == 200
    assert dict(kept.json()["headers"])["cookie"] == "a=b"


# --- connection limits, counted in Lua -----------------------------------------------------------


def hold(stack: ExitStack, client: httpx.Client, url: str) -> Iterator[bytes]:
    """A request the app answers slowly, held open (its first bytes read) until ``stack``
    closes it or the test reads the rest."""
    response = stack.enter_context(client.stream("GET", url))
    assert response.status_code == 200
    chunks = response.iter_raw()
    stack.callback(chunks.close)  # kept until then: a dropped iterator closes the connection
    next(chunks)
    return chunks


def slow(instance) -> str:
    """An address the app answers with a first line and then nothing, until the browser leaves."""
    return route_url(instance, f"slow?id={uuid.uuid4().hex}")


def test_a_worker_that_keeps_one_grant_serves_routes_in_turn_and_a_held_request_to_the_end(
    launch, nginx_with, owner, upstream
):
    # Each grant a worker keeps past its bound makes it start afresh; a grant a request
    # still uses is freed only when that request ends. One worker sees every request.
    def one_worker_one_grant(text: str) -> str:
        text = text.replace("worker_processes auto;", "worker_processes 1;")
        return text.replace("grants_per_worker = 4096", "grants_per_worker = 1")

    server = nginx_with(edit=one_worker_one_grant)
    first, second = launch(), launch()
    stream_id = uuid.uuid4().hex
    with (
        browser(server, open_session(server, owner, first)) as one,
        browser(server, open_session(server, owner, second)) as other,
        ExitStack() as held,
    ):
        stream = hold(held, one, route_url(first, f"sse?id={stream_id}"))
        seen = []
        for _ in range(6):
            for client, instance in ((one, first), (other, second)):
                response = client.get(route_url(instance, "echo"))
                assert response.status_code == 200
                seen.append(dict(response.json()["headers"])["x-forwarded-prefix"])
        upstream.get("release", id=stream_id)
        assert b"".join(stream) == b"data: two\n\n"
    assert seen == [f"/w/{first.pk}/web", f"/w/{second.pk}/web"] * 6
    assert "signal" not in server.output  # no worker died


def test_a_limit_that_is_not_a_power_of_two_admits_exactly_that_many(launch, nginx, owner, upstream):
    instance = launch(limits={"per_instance": 3})
    ids = [uuid.uuid4().hex for _ in range(3)]
    with browser(nginx, open_session(nginx, owner, instance)) as client, ExitStack() as held:
        streams = [hold(held, client, route_url(instance, f"sse?id={stream_id}")) for stream_id in ids]
        page = client.get(route_url(instance, "echo"))
        as_json = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
        for stream_id, stream in zip(ids, streams, strict=True):
            upstream.get("release", id=stream_id)
            assert b"".join(stream) == b"data: two\n\n"
        # Given back as they ended: three at a time again, and no more.
        assert eventually(lambda: client.get(route_url(instance, "echo")).status_code == 200)
        for _ in range(3):
            hold(held, client, slow(instance))
        assert client.get(route_url(instance, "echo")).status_code == 429
    # The browser's page and the API client's envelope, from the portal as for any refusal.
    assert page.status_code == 429
    assert int(page.headers["retry-after"]) > 0
    assert "Too many connections" in page.text
    assert f"/instances/{instance.pk}/" in page.text
    assert as_json.status_code == 429
    assert int(as_json.headers["retry-after"]) > 0
    assert as_json.json()["error"]["code"] == "rate_limited"


def test_a_count_is_given_back_once_however_the_request_ends(launch, nginx, owner, upstream):
    # The user's count spans routes, so one held request here shows a count given back
    # twice, and the app that refuses connections (its 502 page comes by an internal
    # redirect, which empties the request's Lua context) counts against it too.
    instance = launch(limits={"per_user": 3})
    refusing = launch(limits={"per_user": 3}, port=free_port())
    with (
        browser(nginx, open_session(nginx, owner, instance)) as client,
        browser(nginx, open_session(nginx, owner, refusing)) as failing,
        ExitStack() as held,
    ):
        hold(held, client, slow(instance))
        # Three 502 pages in a row with two places free: each gave its count back.
        assert [failing.get(route_url(refusing, "echo")).status_code for _ in range(3)] == [502] * 3
        # The app fails mid-response.
        for _ in range(3):
            with pytest.raises(httpx.RemoteProtocolError):
                client.get(route_url(instance, "die"))
        # The browser leaves mid-response.
        for _ in range(3):
            aborted = uuid.uuid4().hex
            with client.stream("GET", route_url(instance, f"slow?id={aborted}")) as response:
                next(response.iter_raw())
            assert eventually(lambda gone=aborted: upstream.get("disconnected", id=gone)["disconnected"])
        assert eventually(lambda: client.get(route_url(instance, "echo")).status_code == 200)
        # Two places, as before all that: none was lost, none given back twice.
        hold(held, client, slow(instance))
        hold(held, client, slow(instance))
        assert client.get(route_url(instance, "echo")).status_code == 429


def test_a_websocket_counts_while_it_is_open(launch, nginx, owner):
    instance = launch(limits={"per_instance": 3})
    cookie = open_session(nginx, owner, instance)
    url, echo = ws_url(instance, "ws"), route_url(instance, "echo")

    async def refused() -> int:
        with pytest.raises(InvalidStatus) as refusal:
            async with connect(url, **handshake(nginx, cookie)):
                pass
        return refusal.value.response.status_code

    async def scenario():
        async with AsyncExitStack() as stack:

            async def opened():
                return await stack.enter_async_context(connect(url, **handshake(nginx, cookie)))

            sockets = [await opened() for _ in range(3)]
            assert await refused() == 429
            with browser(nginx, cookie) as client:
                assert client.get(echo).status_code == 429
            await sockets[0].close()
            # Given back once it closed: one more opens, and then none.
            deadline = time.monotonic() + 10
            while True:
                try:
                    reopened = await opened()
                    break
                except InvalidStatus:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
            await reopened.send("hi")
            assert await reopened.recv() == "hi"
            assert await refused() == 429

    asyncio.run(scenario())


# --- a hostile app (issue 15) -------------------------------------------------------------------


# --- the portal's own WebSockets --------------------------------------------------------------


def test_a_client_address_holds_a_bounded_number_of_the_portals_websockets(
    nginx_with, owner, project, settings
):
    def two_at_once(text: str) -> str:
        limit = "limit_conn gpuaas_portal_sockets 256;"
        assert limit in text
        return text.replace(limit, "limit_conn gpuaas_portal_sockets 2;")

    server = nginx_with(edit=two_at_once)
    url = f"ws://127.0.0.1:{server.port}/ws/projects/{project.pk}/allocations/"
    cookie = f"{settings.SESSION_COOKIE_NAME}={login_session(owner).session_key}"
    options = {
        "additional_headers": {"Cookie": cookie, "Origin": server.url},
        "proxy": None,
        "open_timeout": 10,
    }

    async def scenario():
        async with AsyncExitStack() as stack:
            sockets = [await stack.enter_async_context(connect(url, **options)) for _ in range(2)]
            with pytest.raises(InvalidStatus) as refusal:
                async with connect(url, **options):
                    pass
            assert refusal.value.response.status_code == 429
            await sockets[0].close()
            deadline = time.monotonic() + 10
            while True:  # nginx counts it gone once the portal's side has closed too
                try:
                    return await stack.enter_async_context(connect(url, **options))
                except InvalidStatus:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)

    asyncio.run(scenario())
