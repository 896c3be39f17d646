"""What only the production data plane does: Debian's nginx running docker/nginx.conf
in front of the portal (uvicorn). nginx moves the bytes; the portal answers
``/_gpuaas/auth``, for nginx alone, and nginx keeps a grant for up to 3 s
(docs/decisions/0016, 0017). What both data planes do is in ``test_data_planes.py``."""

from __future__ import annotations

import httpx
import pytest

from apps.proxy import sessions
from apps.tenancy.models import Membership
from tests.conftest import member
from tests.proxy.conftest import (
    AUTH_SECRET,
    browser,
    eventually,
    login_session,
    mint_ticket,
    open_session,
    route_url,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_route_without_its_slash_is_redirected(launch, nginx):
    instance = launch()
    with browser(nginx) as client:
        bare = client.get(route_url(instance).rstrip("/") + "?x=1")
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
