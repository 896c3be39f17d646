"""``POST /_gpuaas/session``: the launcher's ticket becomes a route cookie, once, on
the route's own origin."""

from __future__ import annotations

import time

import httpx
import pytest

from apps.proxy import sessions
from tests.support.proxy import browser, mint_ticket, route_url

pytestmark = pytest.mark.django_db(transaction=True)


def exchange(server, ticket: str, **kwargs) -> httpx.Response:
    return httpx.post(
        f"{server.url}/_gpuaas/session", data={"ticket": ticket, **kwargs.pop("data", {})}, **kwargs
    )


def test_a_ticket_becomes_a_route_cookie_and_a_redirect_to_the_entry_path(launch, proxy_server, owner):
    instance = launch()
    response = exchange(proxy_server, mint_ticket(owner, instance)["ticket"])
    assert response.status_code == 303
    assert response.headers["location"] == f"/w/{instance.pk}/web/lab"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{sessions.COOKIE}=")
    assert f"Path=/w/{instance.pk}/web/" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Max-Age=" in cookie
    assert "Secure" not in cookie
    with browser(proxy_server, response.cookies[sessions.COOKIE]) as client:
        assert client.get(route_url(instance, "echo")).status_code == 200


def test_next_is_honoured_only_for_a_path_on_this_origin(launch, proxy_server, owner):
    instance = launch()
    wanted = f"/w/{instance.pk}/web/tree?path=a"
    assert (
        exchange(proxy_server, mint_ticket(owner, instance)["ticket"], data={"next": wanted}).headers[
            "location"
        ]
        == wanted
    )
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        location = exchange(
            proxy_server, mint_ticket(owner, instance)["ticket"], data={"next": elsewhere}
        ).headers["location"]
        assert location == f"/w/{instance.pk}/web/lab"


def test_the_cookie_is_secure_behind_https(launch, proxy_server, owner):
    instance = launch()
    response = exchange(
        proxy_server, mint_ticket(owner, instance)["ticket"], headers={"X-Forwarded-Proto": "https"}
    )
    assert "Secure" in response.headers["set-cookie"]


def test_a_ticket_works_once(launch, proxy_server, owner):
    instance = launch()
    ticket = mint_ticket(owner, instance)["ticket"]
    assert exchange(proxy_server, ticket).status_code == 303
    again = exchange(proxy_server, ticket)
    assert again.status_code == 401
    assert "already used" in again.text
    assert "set-cookie" not in again.headers


def test_a_ticket_only_works_on_its_routes_host(settings, launch, proxy_server, owner):
    settings.APPS_DOMAIN = "apps.localhost"
    instance = launch()
    route = instance.proxy_routes.get()
    wrong = exchange(proxy_server, mint_ticket(owner, instance)["ticket"])  # the portal's host
    assert wrong.status_code == 401
    assert "another app" in wrong.text
    right_host = f"{route.slug}.apps.localhost:{proxy_server.port}"
    right = exchange(proxy_server, mint_ticket(owner, instance)["ticket"], headers={"Host": right_host})
    assert right.status_code == 303
    assert "Path=/;" in right.headers["set-cookie"]


def test_an_expired_ticket_is_refused(settings, launch, proxy_server, owner):
    settings.PROXY_TICKET_SECONDS = 1
    instance = launch()
    ticket = mint_ticket(owner, instance)["ticket"]
    time.sleep(2.1)  # let it expire, as a slow launcher would
    assert exchange(proxy_server, ticket).status_code == 401


def test_a_ticket_posted_from_another_site_is_refused(launch, proxy_server, owner):
    instance = launch()
    ticket = mint_ticket(owner, instance)["ticket"]
    response = exchange(proxy_server, ticket, headers={"Origin": "https://evil.example"})
    assert response.status_code == 403
    assert "set-cookie" not in response.headers
    portal = exchange(
        proxy_server, mint_ticket(owner, instance)["ticket"], headers={"Origin": proxy_server.url}
    )
    assert portal.status_code == 303
