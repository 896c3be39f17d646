"""The proxy's HTTP path through real sockets: the portal under uvicorn, the app in
its own process (``tests.support.upstream``), PostgreSQL and Redis as in production."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
import uuid

import httpx
import psutil
import pytest

from apps.proxy import access, sessions
from apps.proxy.dataplane import limits
from apps.runtime import services as runtime
from apps.runtime.services import runtime_secret
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.conftest import member
from tests.proxy.conftest import browser, login_session, mint_ticket, open_session, route_url
from tests.support.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def eventually(check, seconds: float = 15.0):
    """``check()`` once it is truthy; caches in front of the decision are seconds long."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def everything_seen(response: httpx.Response) -> str:
    """All the browser can read of a response: URL, status line, headers, body."""
    return "\n".join(
        [str(response.url), *(f"{k}: {v}" for k, v in response.headers.multi_items()), response.text]
    )


# --- the bridged secret -------------------------------------------------------------


def test_bridge_header_reaches_the_app_and_its_token_never_reaches_the_browser(launch, proxy_server, owner):
    instance = launch()
    secret = runtime_secret(instance, "token")
    assert secret
    cookie = open_session(proxy_server, owner, instance)
    with browser(proxy_server, cookie) as client:
        echo = client.get(route_url(instance, "echo"))
        lab = client.get(route_url(instance, "lab"))
        compressed = client.get(route_url(instance, "lab-gzip"), headers={"Accept-Encoding": "gzip"})
        leaky_headers = client.get(route_url(instance, "headers"))

    # The app got "Authorization: token <secret>" and was asked not to compress.
    digests = echo.json()["digests"]
    assert digests["authorization"] == hashlib.sha256(f"token {secret}".encode()).hexdigest()
    assert dict(echo.json()["headers"])["accept-encoding"] == "identity"
    # JupyterLab's page config is served with its token blanked, even when the app compresses anyway.
    assert lab.status_code == 200 and '"token": ""' in lab.text and "JupyterLab" in lab.text
    assert compressed.status_code == 200 and '"token": ""' in compressed.text
    assert "content-encoding" not in compressed.headers
    assert "x-echo-token" not in leaky_headers.headers and leaky_headers.headers["x-fine"] == "ok"
    for response in (echo, lab, compressed, leaky_headers):
        assert secret not in everything_seen(response)


# --- request and response headers -------------------------------------------------------


def test_platform_credentials_hop_by_hop_and_forwarded_headers_stay_behind(launch, proxy_server, owner):
    instance = launch()
    cookie = open_session(proxy_server, owner, instance)
    response = httpx.get(
        route_url(instance, "echo"),
        headers={
            "Cookie": f"sessionid=portal; csrftoken=csrf; {sessions.COOKIE}={cookie}; app_pref=dark",
            "Authorization": "Bearer platform-token",
            "X-Forwarded-Host": "evil.example",
            "X-Forwarded-Prefix": "/elsewhere",
            "Forwarded": "for=203.0.113.9",
            "Connection": "keep-alive, x-private",
            "X-Private": "hop",
            "Keep-Alive": "timeout=5",
            "Origin": proxy_server.url,
            "X-App-Header": "kept",
        },
        trust_env=False,
    )
    assert response.status_code == 200
    seen = dict(response.json()["headers"])
    assert seen["cookie"] == "app_pref=dark"
    assert "Bearer" not in seen["authorization"]
    # (uvicorn trusts loopback as its proxy, as it trusts nginx in production, so a
    # client-sent X-Forwarded-For would name the client here: it is left out.)
    assert seen["x-forwarded-for"] == "127.0.0.1"
    assert seen["x-forwarded-host"] == proxy_server.url.removeprefix("http://")
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-prefix"] == f"/w/{instance.pk}/web"
    assert seen["host"] == f"{instance.endpoints.get().host}:{instance.endpoints.get().port}"
    assert seen["origin"] == f"http://{seen['host']}"  # JupyterLab checks Origin against Host
    assert seen["x-app-header"] == "kept"
    for dropped in ("x-private", "keep-alive", "forwarded"):
        assert dropped not in seen


def test_hop_by_hop_response_headers_are_dropped_and_framing_follows_the_route(launch, proxy_server, owner):
    embedded = launch()
    separate = launch(manifest=_link_out_manifest())
    pages = {}
    for instance in (embedded, separate):
        with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
            pages[instance.pk] = (
                client.get(route_url(instance, "headers")),
                client.get(route_url(instance, "nocsp")),
            )

    headers, no_csp = pages[embedded.pk]
    assert "x-hop" not in headers.headers and "keep-alive" not in headers.headers
    assert (
        headers.headers["content-security-policy"]
        == f"default-src 'self'; frame-ancestors {proxy_server.url}"
    )
    assert "x-frame-options" not in headers.headers  # the CSP governs: the portal may frame it
    assert no_csp.headers["content-security-policy"] == f"frame-ancestors {proxy_server.url}"

    headers, no_csp = pages[separate.pk]
    assert headers.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'"
    assert headers.headers["x-frame-options"] == "DENY"
    assert no_csp.headers["content-security-policy"] == "frame-ancestors 'none'"


def _link_out_manifest() -> dict:
    from tests.proxy.conftest import proxied_manifest

    manifest = proxied_manifest()
    manifest["ui"]["mode_supported"] = ["link_out"]
    return manifest


# --- redirects and cookies ----------------------------------------------------------------


def test_redirects_lead_back_onto_the_route(launch, proxy_server, owner):
    aware = launch()  # serves under /w/{iid}/web/ itself
    unaware = launch(base_url_aware=False)  # serves at /, the proxy maps the prefix
    locations = {}
    for instance in (aware, unaware):
        with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
            locations[instance.pk] = {
                to: client.get(route_url(instance, f"redirect?to={to}")).headers["location"]
                for to in ("absolute", "relative", "root", "elsewhere")
            }
    assert locations[aware.pk] == {
        "absolute": f"/w/{aware.pk}/web/landing?from=redirect",
        "relative": f"/w/{aware.pk}/web/landing",
        "root": "/landing",  # the app's own choice, outside its route
        "elsewhere": "https://example.org/docs",
    }
    assert locations[unaware.pk] == {
        "absolute": f"/w/{unaware.pk}/web/landing?from=redirect",
        "relative": f"/w/{unaware.pk}/web/landing",
        "root": f"/w/{unaware.pk}/web/landing",
        "elsewhere": "https://example.org/docs",
    }


def test_app_cookies_are_host_only_scoped_to_the_route_and_cannot_touch_the_portals(
    launch, proxy_server, owner
):
    instance = launch()
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        response = client.get(route_url(instance, "cookies"))
    prefix = f"/w/{instance.pk}/web/"
    assert response.headers.get_list("set-cookie") == [
        f"app=1; HttpOnly; Path={prefix}",
        f"rooted=2; SameSite=Lax; Path={prefix}",
        f"plain=3; Path={prefix}",
    ]


def test_subdomain_routes_rewrite_onto_their_own_origin(settings, launch, proxy_server, owner):
    settings.APPS_DOMAIN = "apps.localhost"
    instance = launch(base_url_aware=False)
    route = instance.proxy_routes.get()
    assert route.mode == "subdomain"
    host = f"{route.slug}.apps.localhost:{proxy_server.port}"
    cookie = open_session(proxy_server, owner, instance, host=host)
    with browser(proxy_server, cookie, base_url=proxy_server.url) as client:
        headers = {"Host": host}
        echo = client.get("/echo", headers=headers)
        absolute = client.get("/sub/redirect?to=absolute", headers=headers)
        cookies = client.get("/cookies", headers=headers)
        portal_host = client.get("/echo")  # the same path on the portal's host is the portal's
    assert echo.status_code == 200 and echo.json()["path"] == "/echo"
    assert dict(echo.json()["headers"])["x-forwarded-host"] == host
    assert "x-forwarded-prefix" not in dict(echo.json()["headers"])
    assert absolute.headers["location"] == "/sub/landing?from=redirect"
    assert cookies.headers.get_list("set-cookie") == [
        "app=1; HttpOnly; Path=/",
        "rooted=2; SameSite=Lax; Path=/",
        "plain=3; Path=/",
    ]
    assert portal_host.status_code == 404 and "x-forwarded-host" not in portal_host.text


# --- streaming ----------------------------------------------------------------------------


def test_server_sent_events_arrive_one_by_one(launch, proxy_server, owner, upstream):
    instance = launch()
    stream_id = uuid.uuid4().hex
    with (
        browser(proxy_server, open_session(proxy_server, owner, instance)) as client,
        client.stream("GET", route_url(instance, f"sse?id={stream_id}")) as response,
    ):
        assert response.headers["content-type"] == "text/event-stream"
        chunks = response.iter_raw()
        assert next(chunks) == b"data: one\n\n"  # while the app still holds back the second event
        upstream.get("release", id=stream_id)
        assert next(chunks) == b"data: two\n\n"


GIGABYTE = 1024**3


def test_a_gigabyte_streams_up_and_down_with_flat_memory(launch, proxy_server, owner):
    instance = launch()
    process = psutil.Process()
    baseline = process.memory_info().rss
    peak = [baseline]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    megabyte = b"u" * (1024 * 1024)
    try:
        with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
            uploaded = client.post(
                route_url(instance, "upload"), content=(megabyte for _ in range(GIGABYTE // len(megabyte)))
            )
            received = 0
            with client.stream("GET", route_url(instance, f"download?n={GIGABYTE}")) as response:
                assert response.headers["content-length"] == str(GIGABYTE)
                for chunk in response.iter_raw():
                    received += len(chunk)
    finally:
        done.set()
        sampler.join()
    assert uploaded.json() == {"bytes": GIGABYTE}
    assert received == GIGABYTE
    # Portal, proxy and client share this process; none of them held the gigabyte.
    assert peak[0] - baseline < 150 * 1024 * 1024


def test_a_browser_that_leaves_closes_the_apps_connection(launch, proxy_server, owner, upstream):
    instance = launch()
    stream_id = uuid.uuid4().hex
    with (
        browser(proxy_server, open_session(proxy_server, owner, instance)) as client,
        client.stream("GET", route_url(instance, f"slow?id={stream_id}")) as response,
    ):
        assert next(response.iter_raw()) == b"waiting\n"
    assert eventually(lambda: upstream.get("disconnected", id=stream_id)["disconnected"])


def test_an_app_that_dies_mid_response_breaks_the_browsers_connection(launch, proxy_server, owner):
    instance = launch()
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(route_url(instance, "die"))
        assert client.get(route_url(instance, "echo")).status_code == 200


# --- limits -------------------------------------------------------------------------------


@pytest.mark.parametrize("counted_in", ["redis", "process"])
def test_connections_over_the_instance_limit_get_429_with_retry_after(
    settings, launch, proxy_server, owner, counted_in
):
    if counted_in == "process":
        settings.REDIS_URL = ""
    instance = launch(limits={"per_instance": 1})
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        with client.stream("GET", route_url(instance, f"slow?id={uuid.uuid4().hex}")) as held:
            chunks = held.iter_raw()  # kept: a dropped iterator closes the connection
            next(chunks)
            refused = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert refused.json()["error"]["code"] == "too_many_connections"
        # The held connection is given back once the browser leaves.
        assert eventually(lambda: client.get(route_url(instance, "echo")).status_code == 200)


def test_the_user_limit_counts_one_persons_connections(launch, proxy_server, owner, project):
    instance = launch(limits={"per_user": 1})
    colleague = member("project_admin", project=project)
    with (
        browser(proxy_server, open_session(proxy_server, owner, instance)) as mine,
        browser(proxy_server, open_session(proxy_server, colleague, instance)) as theirs,
        mine.stream("GET", route_url(instance, f"slow?id={uuid.uuid4().hex}")) as held,
    ):
        chunks = held.iter_raw()  # kept: a dropped iterator closes the connection
        next(chunks)
        assert mine.get(route_url(instance, "echo")).status_code == 429
        assert theirs.get(route_url(instance, "echo")).status_code == 200


def test_a_burst_of_connections_is_counted_and_given_back_in_full(settings, launch, owner):
    # More at once than redis-py's connection pool holds (100): a count that failed to
    # go back would refuse this person for an hour.
    settings.PROXY_MAX_CONNECTIONS_PER_INSTANCE = settings.PROXY_MAX_CONNECTIONS_PER_USER = 300
    instance = launch(limits={"per_instance": 300, "per_user": 300})
    url = httpx.URL(route_url(instance))

    async def burst(target) -> list:
        assert target is not None and target.limit_per_instance == target.limit_per_user == 300
        held = await asyncio.gather(*(limits.acquire(target, owner.pk) for _ in range(300)))
        await asyncio.gather(*(limits.release(keys) for keys in held if keys))
        return held

    async def twice() -> tuple[list, list]:
        target = await access.resolve(url.host + (f":{url.port}" if url.port else ""), url.path)
        return await burst(target), await burst(target)

    first, second = asyncio.run(twice())
    # Every one counted, and every count given back: the second burst fits again.
    assert len(first) == 300 and all(first) and all(second)


# --- who gets in ----------------------------------------------------------------------------


def test_without_a_session_the_browser_is_sent_back_to_the_portal(launch, proxy_server):
    instance = launch()
    with browser(proxy_server) as client:
        page = client.get(route_url(instance, "echo"))
        forged = client.get(route_url(instance, "echo"), headers={"Cookie": f"{sessions.COOKIE}=forged"})
    assert page.status_code == 401 and "Open this app from the portal" in page.text
    assert f'/instances/{instance.pk}/">Back to the portal</a>' in page.text
    assert forged.status_code == 401


def test_another_tenants_user_is_denied(launch, proxy_server, other_tenant_project):
    instance = launch()
    stranger = member("tenant_admin", tenant=other_tenant_project.tenant)
    with browser(proxy_server, open_session(proxy_server, stranger, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 403 and "Access denied" in page.text


def test_a_cookie_for_one_route_does_not_open_another(launch, proxy_server, owner):
    first, second = launch(), launch()
    with browser(proxy_server, open_session(proxy_server, owner, first)) as client:
        assert client.get(route_url(second, "echo")).status_code == 401


def test_revoked_access_and_logout_stop_the_next_request(launch, proxy_server, owner, project):
    instance = launch()
    colleague = member("project_admin", project=project)
    session = login_session(owner)
    minted = mint_ticket(owner, instance, session)
    exchanged = httpx.post(f"{proxy_server.url}/_gpuaas/session", data={"ticket": minted["ticket"]})
    with (
        browser(proxy_server, exchanged.cookies[sessions.COOKIE]) as mine,
        browser(proxy_server, open_session(proxy_server, colleague, instance)) as theirs,
    ):
        assert mine.get(route_url(instance, "echo")).status_code == 200
        assert theirs.get(route_url(instance, "echo")).status_code == 200
        Membership.objects.filter(user=colleague).delete()
        sessions.end_platform_session(session.session_key, owner.pk)  # what logging out does
        assert theirs.get(route_url(instance, "echo")).status_code == 403
        assert mine.get(route_url(instance, "echo")).status_code == 401


def test_a_stopped_instance_is_not_reached_and_strangers_do_not_learn_its_state(launch, proxy_server, owner):
    instance = launch()
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        runtime.change(principals.for_user(owner), instance, "stop")
        page = eventually(lambda: (r := client.get(route_url(instance, "echo"))).status_code == 503 and r)
        assert page and "The app is not running" in page.text
    with browser(proxy_server) as stranger:
        assert stranger.get(route_url(instance, "echo")).status_code == 401


# --- when the app is not there ----------------------------------------------------------------


def test_a_starting_app_answers_503_with_retry_after(launch, proxy_server, owner, project, active_allocation):
    from tests.proxy.conftest import proxied_manifest, publish_manifest

    app = publish_manifest("starting", proxied_manifest())
    operation = runtime.launch(
        principals.for_user(owner), project, app_slug=app.slug, allocation_id=active_allocation.pk
    )
    instance = operation.instance
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 503 and int(page.headers["retry-after"]) > 0
    assert "The app is starting" in page.text and 'http-equiv="refresh"' in page.text


def test_an_app_that_refuses_connections_is_a_502(launch, proxy_server, owner):
    instance = launch(port=free_port())
    with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
        as_json = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
    assert page.status_code == 502 and "The app is not answering" in page.text
    assert f'/instances/{instance.pk}/">Back to the portal</a>' in page.text
    assert as_json.status_code == 502
    assert set(as_json.json()["error"]) == {"code", "message", "correlation_id", "details"}


def test_an_app_that_does_not_accept_connections_is_a_504(settings, launch, proxy_server, owner):
    settings.PROXY_UPSTREAM_CONNECT_SECONDS = 0.5
    # A listener whose accept queue is full: further connection attempts hang.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        instance = launch(port=port)
        with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
            page = client.get(route_url(instance, "echo"))
        assert page.status_code == 504 and "did not answer in time" in page.text
    finally:
        for sock in (*fillers, listener):
            sock.close()


def test_unknown_routes_are_404(proxy_server):
    with browser(proxy_server) as client:
        assert client.get(f"{proxy_server.url}/w/{uuid.uuid4()}/web/").status_code == 404
        assert client.get(f"{proxy_server.url}/w/not-a-uuid/web/").status_code == 404
        assert client.get(f"{proxy_server.url}/_gpuaas/nothing").status_code == 404
