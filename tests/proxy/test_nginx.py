"""The production data plane: Debian's nginx running docker/nginx.conf in front of
the portal (uvicorn) and the test app, routing the requests the ASGI proxy's tests
route. nginx moves the bytes; the portal answers ``/_gpuaas/auth``."""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from apps.proxy import sessions
from apps.runtime import services as runtime
from apps.runtime.services import runtime_secret
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.conftest import member
from tests.proxy.conftest import (
    browser,
    login_session,
    mint_ticket,
    open_session,
    proxied_manifest,
    publish_manifest,
    route_url,
)
from tests.support.nginx import Nginx
from tests.support.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)

AUTH_SECRET = "nginx-and-portal-share-this"
APPS_DOMAIN = "apps.localhost"


@pytest.fixture
def nginx(settings, proxy_server):
    """nginx in front of the portal; routes are planned on nginx's address."""
    settings.PROXY_AUTH_SECRET = AUTH_SECRET
    server = Nginx(f"127.0.0.1:{proxy_server.port}", AUTH_SECRET, apps_domain=APPS_DOMAIN).start()
    settings.ISSUER = server.url
    yield server
    server.stop()


def eventually(check, seconds: float = 15.0):
    """``check()`` once it is truthy: nginx reuses an authorization for two seconds."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def everything_seen(response: httpx.Response) -> str:
    return "\n".join(
        [str(response.url), *(f"{k}: {v}" for k, v in response.headers.multi_items()), response.text]
    )


def ws_url(instance, path: str) -> str:
    return route_url(instance, path).replace("http://", "ws://", 1)


# --- the bridge and the token -----------------------------------------------------------


def test_bridge_header_reaches_the_app_and_its_token_is_blanked_from_pages(launch, nginx, owner):
    instance = launch()
    secret = runtime_secret(instance, "token")
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        echo = client.get(route_url(instance, "echo"), headers={"Authorization": "Bearer platform-token"})
        lab = client.get(route_url(instance, "lab"), headers={"Accept-Encoding": "gzip"})

    seen = dict(echo.json()["headers"])
    assert echo.json()["digests"]["authorization"] == hashlib.sha256(f"token {secret}".encode()).hexdigest()
    assert seen["accept-encoding"] == "identity"
    # JupyterLab's page config reaches the browser with its token blanked, though the
    # token straddles the app's small writes.
    assert lab.status_code == 200 and '"token": ""' in lab.text and "JupyterLab" in lab.text
    for response in (echo, lab):
        assert secret not in everything_seen(response)


def test_platform_credentials_and_client_forwarding_headers_stay_behind(launch, nginx, owner):
    instance = launch()
    cookie = open_session(nginx, owner, instance)
    response = httpx.get(
        route_url(instance, "echo?q=1"),
        headers={
            "Cookie": f"sessionid=portal; csrftoken=csrf; {sessions.COOKIE}={cookie}; app_pref=dark; _xsrf=x",
            "X-Forwarded-For": "203.0.113.9",
            "X-Forwarded-Host": "evil.example",
            "X-Forwarded-Prefix": "/elsewhere",
            "Forwarded": "for=203.0.113.9",
            "Keep-Alive": "timeout=5",
            "Origin": nginx.url,
            "X-App-Header": "kept",
        },
        trust_env=False,
    )
    assert response.status_code == 200
    echo = response.json()
    seen = dict(echo["headers"])
    endpoint = instance.endpoints.get()
    assert (echo["path"], echo["query"]) == (f"/w/{instance.pk}/web/echo", "q=1")
    assert seen["cookie"] == "app_pref=dark; _xsrf=x"
    assert seen["x-forwarded-for"] == "127.0.0.1"
    assert seen["x-forwarded-host"] == nginx.url.removeprefix("http://")
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-prefix"] == f"/w/{instance.pk}/web"
    assert seen["host"] == f"{endpoint.host}:{endpoint.port}"
    assert seen["origin"] == f"http://{seen['host']}"  # JupyterLab checks Origin against Host
    assert seen["x-app-header"] == "kept"
    for dropped in ("keep-alive", "forwarded", "x-real-ip"):
        assert dropped not in seen


def test_an_app_that_does_not_know_its_base_path_is_served_at_its_root(launch, nginx, owner):
    instance = launch(base_url_aware=False)
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        echo = client.get(route_url(instance, "files/a%20b.txt?x=%2F"))
    assert echo.json()["raw_path"] == "/files/a%20b.txt"  # the raw path, not re-encoded
    assert echo.json()["query"] == "x=%2F"
    assert "x-forwarded-prefix" in dict(echo.json()["headers"])


def test_framing_follows_the_route(launch, nginx, owner):
    link_out = proxied_manifest()
    link_out["ui"]["mode_supported"] = ["link_out"]
    embedded, separate = launch(), launch(manifest=link_out)
    answers = {}
    for instance in (embedded, separate):
        with browser(nginx, open_session(nginx, owner, instance)) as client:
            answers[instance.pk] = [client.get(route_url(instance, path)) for path in ("headers", "nocsp")]

    headers, no_csp = answers[embedded.pk]
    assert "x-frame-options" not in headers.headers  # the portal may frame it
    assert no_csp.headers["content-security-policy"] == f"frame-ancestors {nginx.url}"
    headers, no_csp = answers[separate.pk]
    assert headers.headers["x-frame-options"] == "DENY"
    assert no_csp.headers["content-security-policy"] == "frame-ancestors 'none'"
    assert headers.headers["x-fine"] == "ok" and "keep-alive" not in headers.headers


# --- redirects and cookies ------------------------------------------------------------------


def test_redirects_lead_back_onto_the_route(launch, nginx, owner):
    aware = launch()
    unaware = launch(base_url_aware=False)
    locations = {}
    for instance in (aware, unaware):
        with browser(nginx, open_session(nginx, owner, instance)) as client:
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


def test_app_cookies_are_host_only_and_confined_to_the_route(launch, nginx, owner):
    instance = launch()
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        response = client.get(route_url(instance, "cookies"))
    prefix = f"/w/{instance.pk}/web/"
    cookies = {}
    for header in response.headers.get_list("set-cookie"):
        name = header.split("=", 1)[0]
        cookies[name] = dict(
            (part.strip().split("=", 1) + [""])[:2] for part in header.split(";")[1:] if part.strip()
        )
    assert set(cookies) == {"app", "rooted", "plain", "sessionid"}
    # No cookie for another host (an empty Domain, which browsers ignore: host-only), none
    # outside the route: the portal's session cannot be planted.
    assert all(attributes.get("Domain", "") == "" for attributes in cookies.values())
    assert cookies["app"]["Path"] == cookies["rooted"]["Path"] == cookies["sessionid"]["Path"] == prefix
    assert "Path" not in cookies["plain"]  # the browser scopes it to the page's directory, inside the route


def test_subdomain_routes_rewrite_onto_their_own_origin(settings, launch, nginx, owner):
    settings.APPS_DOMAIN = APPS_DOMAIN
    instance = launch(base_url_aware=False)
    route = instance.proxy_routes.get()
    assert route.mode == "subdomain"
    host = f"{route.slug}.{APPS_DOMAIN}:{nginx.port}"
    cookie = open_session(nginx, owner, instance, host=host)
    with browser(nginx, cookie, base_url=nginx.url) as client:
        headers = {"Host": host}
        echo = client.get("/echo", headers=headers)
        static = client.get("/static/app.js", headers=headers)  # the app's, not the portal's
        absolute = client.get("/sub/redirect?to=absolute", headers=headers)
        cookies = client.get("/cookies", headers=headers)
        portal_host = client.get("/echo")
    assert echo.status_code == 200 and echo.json()["path"] == "/echo"
    assert static.json()["path"] == "/static/app.js"
    assert dict(echo.json()["headers"])["x-forwarded-host"] == host
    assert absolute.headers["location"] == "/sub/landing?from=redirect"
    set_cookies = cookies.headers.get_list("set-cookie")
    assert [c.split(";")[0] for c in set_cookies][:3] == ["app=1", "rooted=2", "plain=3"]
    assert "Path=/;" in set_cookies[1] + ";"  # the app's own origin: its whole path is the route
    assert portal_host.status_code == 404 and "x-forwarded-host" not in portal_host.text


# --- streaming ------------------------------------------------------------------------------


def test_server_sent_events_arrive_one_by_one(launch, nginx, owner, upstream):
    instance = launch()
    stream_id = uuid.uuid4().hex
    with (
        browser(nginx, open_session(nginx, owner, instance)) as client,
        client.stream("GET", route_url(instance, f"sse?id={stream_id}")) as response,
    ):
        assert response.headers["content-type"] == "text/event-stream"
        chunks = response.iter_raw()
        assert next(chunks) == b"data: one\n\n"  # while the app still holds back the second event
        upstream.get("release", id=stream_id)
        assert next(chunks) == b"data: two\n\n"


def test_websocket_echo_through_nginx(launch, nginx, owner):
    instance = launch()
    cookie = open_session(nginx, owner, instance)
    with connect(
        ws_url(instance, "kernels/ws"),
        additional_headers={"Cookie": f"{sessions.COOKIE}={cookie}", "Origin": nginx.url},
        subprotocols=["v1.kernel.websocket.jupyter.org"],
    ) as ws:
        assert ws.subprotocol == "v1.kernel.websocket.jupyter.org"
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
        ws.send(b"\x00\x01")
        assert ws.recv(timeout=10) == b"\x00\x01"
        ws.send("headers")
        seen = json.loads(ws.recv(timeout=10))
    assert seen["authorization"] == f"token {runtime_secret(instance, 'token')}"
    assert sessions.COOKIE not in seen.get("cookie", "")


def test_websockets_from_another_site_or_without_a_session_are_refused(launch, nginx, owner):
    instance = launch()
    cookie = open_session(nginx, owner, instance)
    with pytest.raises(InvalidStatus) as cross_site:
        connect(
            ws_url(instance, "kernels/ws"),
            additional_headers={"Cookie": f"{sessions.COOKIE}={cookie}", "Origin": "http://evil.example"},
        )
    with pytest.raises(InvalidStatus) as anonymous:
        connect(ws_url(instance, "kernels/ws"), additional_headers={"Origin": nginx.url})
    assert cross_site.value.response.status_code == 403
    assert anonymous.value.response.status_code == 401


# --- limits ---------------------------------------------------------------------------------


def test_connections_over_the_instance_limit_get_429_with_retry_after(launch, nginx, owner):
    instance = launch(limits={"per_instance": 1})
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        with client.stream("GET", route_url(instance, f"slow?id={uuid.uuid4().hex}")) as held:
            chunks = held.iter_raw()  # held open while this reference lives
            next(chunks)
            refused = client.get(route_url(instance, "echo"), headers={"Accept": "application/json"})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert refused.json()["error"]["code"] == "too_many_connections"
        assert eventually(lambda: client.get(route_url(instance, "echo")).status_code == 200)


def test_the_user_limit_counts_one_persons_connections(launch, nginx, owner, project):
    instance = launch(limits={"per_user": 1})
    colleague = member("project_admin", project=project)
    with (
        browser(nginx, open_session(nginx, owner, instance)) as mine,
        browser(nginx, open_session(nginx, colleague, instance)) as theirs,
        mine.stream("GET", route_url(instance, f"slow?id={uuid.uuid4().hex}")) as held,
    ):
        chunks = held.iter_raw()  # held open while this reference lives
        next(chunks)
        busy = mine.get(route_url(instance, "echo"))
        assert busy.status_code == 429 and "Too many connections" in busy.text
        assert theirs.get(route_url(instance, "echo")).status_code == 200


# --- who gets in ----------------------------------------------------------------------------


def test_without_a_session_the_browser_is_sent_back_to_the_portal(launch, nginx):
    instance = launch()
    with browser(nginx) as client, browser(nginx, "forged") as forger:
        page = client.get(route_url(instance, "echo"))
        forged = forger.get(route_url(instance, "echo"))
    assert page.status_code == 401 and "Open this app from the portal" in page.text
    assert f'href="{nginx.url}/' in page.text and f"/instances/{instance.pk}/" in page.text
    assert forged.status_code == 401


def test_another_tenants_user_is_denied(launch, nginx, other_tenant_project):
    instance = launch()
    stranger = member("tenant_admin", tenant=other_tenant_project.tenant)
    with browser(nginx, open_session(nginx, stranger, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 403 and "Access denied" in page.text


def test_a_cookie_for_one_route_does_not_open_another(launch, nginx, owner):
    first, second = launch(), launch()
    with browser(nginx, open_session(nginx, owner, first)) as client:
        assert client.get(route_url(first, "echo")).status_code == 200
        assert client.get(route_url(second, "echo")).status_code == 401


def test_unknown_routes_are_404_and_a_route_without_its_slash_is_redirected(launch, nginx, owner):
    instance = launch()
    with browser(nginx) as client:
        missing = client.get(f"{nginx.url}/w/{uuid.uuid4()}/web/echo")
        bare = client.get(route_url(instance).rstrip("/") + "?x=1")
    assert missing.status_code == 404 and "No such app" in missing.text
    assert bare.status_code == 308 and bare.headers["location"].endswith(f"/w/{instance.pk}/web/?x=1")


def test_revoked_access_and_logout_stop_requests_within_the_cache_time(launch, nginx, owner, project):
    instance = launch()
    colleague = member("project_admin", project=project)
    session = login_session(owner)
    minted = mint_ticket(owner, instance, session)
    exchanged = httpx.post(f"{nginx.url}/_gpuaas/session", data={"ticket": minted["ticket"]}, trust_env=False)
    with (
        browser(nginx, exchanged.cookies[sessions.COOKIE]) as mine,
        browser(nginx, open_session(nginx, colleague, instance)) as theirs,
    ):
        assert mine.get(route_url(instance, "echo")).status_code == 200
        assert theirs.get(route_url(instance, "echo")).status_code == 200
        Membership.objects.filter(user=colleague).delete()
        sessions.end_platform_session(session.session_key, owner.pk)  # what logging out does
        assert eventually(lambda: theirs.get(route_url(instance, "echo")).status_code == 403)
        assert eventually(lambda: mine.get(route_url(instance, "echo")).status_code == 401)


def test_a_stopped_instance_is_not_reached(launch, nginx, owner):
    instance = launch()
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200
        runtime.change(principals.for_user(owner), instance, "stop")
        page = eventually(lambda: (r := client.get(route_url(instance, "echo"))).status_code == 503 and r)
        assert page and "The app is not running" in page.text
    with browser(nginx) as stranger:
        assert stranger.get(route_url(instance, "echo")).status_code == 401


def test_a_starting_app_answers_503_with_retry_after(nginx, owner, project, active_allocation):
    app = publish_manifest("starting", proxied_manifest())
    operation = runtime.launch(
        principals.for_user(owner), project, app_slug=app.slug, allocation_id=active_allocation.pk
    )
    instance = operation.instance
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 503 and int(page.headers["retry-after"]) > 0
    assert "The app is starting" in page.text


def test_an_app_that_refuses_connections_is_a_502_page(launch, nginx, owner):
    instance = launch(port=free_port())
    with browser(nginx, open_session(nginx, owner, instance)) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 502 and "The app is not answering" in page.text
    assert f"/instances/{instance.pk}/" in page.text


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
    assert refused.status_code == 403 and "x-gpuaas-upstream" not in refused.headers
    assert ask(proxy_server.url, "guess").status_code == 403
    granted = ask(proxy_server.url, AUTH_SECRET)
    assert granted.status_code == 204 and granted.headers["x-gpuaas-upstream"]
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
    assert refused.status_code == 401 and "cache-control" not in refused.headers
