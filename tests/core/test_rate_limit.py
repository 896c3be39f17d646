"""Per-principal API rate limit: a fixed window counted in Redis (the cache),
answering 429 ``rate_limited`` with ``Retry-After``."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest
import redis
import time_machine
from django.conf import settings as django_settings
from django.core.cache import cache

pytestmark = pytest.mark.django_db

PROJECTS = "/api/v1/projects"
LIMIT = 3
PERIOD = 3600


@pytest.fixture
def low_rate(settings):
    """LIMIT requests per hour; the throttle reads the rate at request time. The clock
    starts a minute into a window, so the whole test runs inside one of them."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"principal": f"{LIMIT}/hour"},
    }
    with time_machine.travel((time.time() // PERIOD + 1) * PERIOD + 60, tick=True):
        yield LIMIT


def token_for(issuer, sub: str) -> str:
    return issuer.token({"sub": sub, "domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]})


def get(api, token: str):
    return api.get(PROJECTS, HTTP_AUTHORIZATION=f"Bearer {token}")


def window_key(principal_key: str) -> str:
    return f"ratelimit:{principal_key}:{int(time.time() // PERIOD)}"


def test_request_over_the_limit_is_rate_limited(api, ccp_issuer, project, low_rate):
    alice, bob = token_for(ccp_issuer, "alice"), token_for(ccp_issuer, "bob")
    for _ in range(low_rate):
        assert get(api, alice).status_code == 200
    response = get(api, alice)
    assert response.status_code == 429, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "rate_limited"
    assert body["error"]["correlation_id"] == response["X-Correlation-ID"]
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= PERIOD

    assert get(api, bob).status_code == 200  # another principal is unaffected
    assert get(api, alice).status_code == 429  # still limited


def test_each_principal_kind_has_its_own_counter(api, ccp_issuer, project, tenant_admin, low_rate):
    for _ in range(low_rate):
        assert get(api, token_for(ccp_issuer, "carol")).status_code == 200
    assert get(api, token_for(ccp_issuer, "carol")).status_code == 429
    api.force_login(tenant_admin)  # a portal user: counted on its own
    for _ in range(low_rate):
        assert api.get(PROJECTS).status_code == 200
    assert api.get(PROJECTS).status_code == 429


def test_the_same_subject_is_one_principal_across_tokens(api, ccp_issuer, project, low_rate):
    """Fetching a fresh token does not reset the count."""
    for _ in range(low_rate):
        assert get(api, token_for(ccp_issuer, "dave")).status_code == 200
    assert get(api, token_for(ccp_issuer, "dave")).status_code == 429


def test_counters_live_in_redis(api, ccp_issuer, project, low_rate):
    assert django_settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    erin = f"jwt:{ccp_issuer.issuer}:erin"
    assert get(api, token_for(ccp_issuer, "erin")).status_code == 200
    assert get(api, token_for(ccp_issuer, "erin")).status_code == 200

    raw = redis.Redis.from_url(django_settings.REDIS_URL)  # a separate connection, as another replica has
    assert int(raw.get(cache.make_key(window_key(erin)))) == 2

    # What another replica counted counts here too.
    raw.incrby(cache.make_key(window_key(erin)), low_rate)
    response = get(api, token_for(ccp_issuer, "erin"))
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1


def test_rate_change_takes_effect_without_restart(api, ccp_issuer, project, low_rate, settings):
    for _ in range(low_rate):
        assert get(api, token_for(ccp_issuer, "frank")).status_code == 200
    assert get(api, token_for(ccp_issuer, "frank")).status_code == 429
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"principal": f"{low_rate + 5}/hour"},
    }
    assert get(api, token_for(ccp_issuer, "frank")).status_code == 200


def test_token_endpoint_is_limited_per_client_address(api, db, low_rate):
    """Unauthenticated callers (guessing client secrets) are counted by address."""
    body = urlencode({"grant_type": "client_credentials", "client_id": "sa-x", "client_secret": "guess"})
    statuses = [
        api.post("/api/v1/auth/token", body, content_type="application/x-www-form-urlencoded").status_code
        for _ in range(low_rate + 1)
    ]
    assert statuses == [401] * low_rate + [429]


def test_client_sent_forwarded_for_does_not_escape_the_limit(api, db, low_rate):
    """uvicorn already resolves trusted proxies into REMOTE_ADDR; a made-up X-Forwarded-For
    per request must not give an anonymous caller a fresh counter each time."""
    body = urlencode({"grant_type": "client_credentials", "client_id": "sa-x", "client_secret": "guess"})
    statuses = [
        api.post(
            "/api/v1/auth/token",
            body,
            content_type="application/x-www-form-urlencoded",
            HTTP_X_FORWARDED_FOR=f"203.0.113.{n}",
        ).status_code
        for n in range(low_rate + 1)
    ]
    assert statuses == [401] * low_rate + [429]
