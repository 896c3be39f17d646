"""Liveness, readiness and metrics endpoints, including readiness failing when a
dependency is down (a closed port, not a mock)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.support.processes import free_port


def _closed_port_redis() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def redis_down(settings):
    url = _closed_port_redis()
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}
    settings.CELERY_BROKER_URL = url
    return url


def test_healthz_answers_ok_json(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_reports_every_dependency_ok(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "cache": "ok", "broker": "ok"}}


@pytest.mark.django_db
def test_readyz_answers_503_with_retry_after_when_redis_is_unreachable(client, redis_down):
    response = client.get("/readyz")
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"] == {"database": "ok", "cache": "unavailable", "broker": "unavailable"}


@pytest.mark.django_db
def test_readyz_checks_the_broker_named_in_settings(client, settings):
    settings.CELERY_BROKER_URL = _closed_port_redis()
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "cache": "ok", "broker": "unavailable"}


def test_healthz_stays_ok_when_redis_is_unreachable(client, redis_down):
    # Liveness must not depend on other systems, or an outage restarts every replica.
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_readyz_answers_503_when_the_database_is_unreachable(client):
    original = dict(connection.settings_dict)
    connection.close()
    connection.close_pool()  # the pool holds connections to the real server
    options = {**original["OPTIONS"]}
    if "pool" in options:  # the shipped wait, not the test settings' longer one (for loaded live servers)
        options["pool"] = {**options["pool"], "timeout": 1.5}
    connection.settings_dict.update({"HOST": "127.0.0.1", "PORT": str(free_port()), "OPTIONS": options})
    try:
        response = client.get("/readyz")
    finally:
        connection.close()
        connection.close_pool()
        connection.settings_dict.clear()
        connection.settings_dict.update(original)
    assert response.status_code == 503
    assert response["Retry-After"]
    assert response.json()["checks"]["database"] == "unavailable"


def test_metrics_is_prometheus_text_with_request_counter(client):
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert "# TYPE gpuaas_http_requests_total counter" in text
    assert 'gpuaas_http_requests_total{method="GET",status="200"}' in text
    assert "# TYPE gpuaas_http_request_duration_seconds histogram" in text


def test_probes_need_no_authentication_and_allow_get_only(client):
    for path in ("/healthz", "/metrics"):
        assert client.post(path).status_code == 405
