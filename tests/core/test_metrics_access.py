"""``/metrics`` outside loopback needs a platform operator's session or the bearer
token of ``GPUAAS_METRICS_TOKEN``; the health endpoints stay open."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
REMOTE = {"REMOTE_ADDR": "203.0.113.5"}
TOKEN = "scrape-" + "x" * 40


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.METRICS_TOKEN = TOKEN


def test_a_remote_anonymous_scrape_is_refused(client):
    response = client.get("/metrics", **REMOTE)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"gpuaas_http_requests_total" not in response.content


def test_health_endpoints_stay_open_remotely(client):
    assert client.get("/healthz", **REMOTE).status_code == 200
    assert client.get("/readyz", **REMOTE).status_code == 200


@pytest.mark.parametrize("given", [TOKEN, TOKEN.upper(), TOKEN[:-1], "", f"{TOKEN} extra"])
def test_only_the_metrics_token_opens_it(client, given):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {given}", **REMOTE)
    assert response.status_code == (200 if given == TOKEN else 401)


def test_without_a_configured_token_no_bearer_opens_it(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ", **REMOTE).status_code == 401


def test_a_platform_operator_session_opens_it(platform_admin):
    operator = Client()
    operator.force_login(platform_admin)
    assert operator.get("/metrics", **REMOTE).status_code == 200
    someone = Client()
    someone.force_login(UserFactory(is_staff=True))
    assert someone.get("/metrics", **REMOTE).status_code == 401


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_loopback_scrapes_need_nothing(client, address):
    response = client.get("/metrics", REMOTE_ADDR=address)
    assert response.status_code == 200
    assert b"gpuaas_http_requests_total" in response.content
