"""The trusted issuers' key cache: fetched once, shared through Redis, refetched on
an unknown ``kid`` at most once a minute per issuer, refreshed by a periodic task.

The issuer is real (JWKS served over HTTP on loopback) and counts its fetches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jwt
import pytest
from django.conf import settings

from apps.tenancy import tasks
from apps.tenancy.auth import trusted_issuers

pytestmark = pytest.mark.django_db

PROJECTS = "/api/v1/projects"
ROOT = Path(__file__).resolve().parents[2]


def get(api, token: str):
    return api.get(PROJECTS, HTTP_AUTHORIZATION=f"Bearer {token}")


def viewer_token(issuer, **kwargs) -> str:
    return issuer.token({"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Viewer"]}, **kwargs)


def test_first_request_fetches_and_later_ones_do_not(api, ccp_issuer, project):
    assert ccp_issuer.jwks_requests == 0
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert ccp_issuer.jwks_requests == 1
    for _ in range(10):
        assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert ccp_issuer.jwks_requests == 1


def test_a_burst_on_a_cold_cache_waits_for_the_one_fetch_instead_of_failing(ccp_issuer, project):
    """Right after a deploy (nothing cached anywhere) CCP's first requests come together:
    one fetches the issuer's keys, the others wait for them rather than answer 401."""
    ccp_issuer.jwks_delay = 0.5
    token = viewer_token(ccp_issuer)
    kid = jwt.get_unverified_header(token)["kid"]
    issuer = trusted_issuers.configured()[ccp_issuer.issuer]
    with ThreadPoolExecutor(8) as pool:
        keys = list(pool.map(lambda _: trusted_issuers.signing_key(issuer, kid, "RS256"), range(8)))
    assert all(key is not None for key in keys)
    assert ccp_issuer.jwks_requests == 1


def test_keys_are_shared_through_the_cache(api, ccp_issuer, project):
    """A process with an empty memory (another replica) finds the keys in Redis, not at the IdP."""
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    trusted_issuers.forget_cached_keys()
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert ccp_issuer.jwks_requests == 1


def test_flood_of_unknown_kids_refetches_at_most_once_a_minute(api, ccp_issuer, project):
    tasks.refresh_trusted_jwks()  # steady state: keys from the periodic refresh, no refetch yet this minute
    assert ccp_issuer.jwks_requests == 1
    for _ in range(50):
        response = get(api, viewer_token(ccp_issuer, headers={"kid": uuid.uuid4().hex}))
        assert response.status_code == 401
    assert ccp_issuer.jwks_requests == 2  # one refetch for the whole flood
    trusted_issuers.forget_cached_keys()  # another replica: the once-a-minute gate lives in Redis too
    for _ in range(10):
        assert get(api, viewer_token(ccp_issuer, headers={"kid": uuid.uuid4().hex})).status_code == 401
    assert ccp_issuer.jwks_requests == 2
    assert get(api, viewer_token(ccp_issuer)).status_code == 200  # real tokens are unaffected
    assert ccp_issuer.jwks_requests == 2


def test_flood_right_after_the_first_fetch_does_not_refetch(api, ccp_issuer, project):
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    for _ in range(50):
        assert get(api, viewer_token(ccp_issuer, headers={"kid": uuid.uuid4().hex})).status_code == 401
    assert ccp_issuer.jwks_requests == 1


def test_rotated_key_is_fetched_and_rotated_out_key_rejected(api, ccp_issuer, project):
    tasks.refresh_trusted_jwks()
    old_key = ccp_issuer.keys[0]
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert ccp_issuer.jwks_requests == 1

    ccp_issuer.rotate()
    assert get(api, viewer_token(ccp_issuer)).status_code == 200  # new kid: one refetch
    assert ccp_issuer.jwks_requests == 2
    assert get(api, viewer_token(ccp_issuer, key=old_key)).status_code == 401
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert ccp_issuer.jwks_requests == 2


def test_periodic_task_refreshes(api, ccp_issuer, project):
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    old_key = ccp_issuer.keys[0]
    ccp_issuer.rotate()

    tasks.refresh_trusted_jwks.delay()  # eager in tests: runs the real task
    assert ccp_issuer.jwks_requests == 2

    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert get(api, viewer_token(ccp_issuer, key=old_key)).status_code == 401
    assert ccp_issuer.jwks_requests == 2


def test_periodic_task_is_scheduled():
    from celery_worker.schedule import beat_schedule

    tasks_scheduled = {entry["task"] for entry in beat_schedule().values()}
    assert "apps.tenancy.tasks.refresh_trusted_jwks" in tasks_scheduled


@pytest.mark.production
def test_key_fetched_by_another_process_is_used_at_once(api, ccp_issuer, project):
    """The periodic refresh runs in the Celery worker, another process: a web process whose
    memory still holds the old key set must pick the new key up from Redis, not reject it."""
    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    ccp_issuer.rotate()

    script = (
        "import django; django.setup(); "
        "from apps.tenancy.tasks import refresh_trusted_jwks; refresh_trusted_jwks()"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "GPUAAS_TRUSTED_ISSUERS": json.dumps(settings.TRUSTED_ISSUERS),
    }
    subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=120, capture_output=True
    )
    assert ccp_issuer.jwks_requests == 2

    assert get(api, viewer_token(ccp_issuer)).status_code == 200
    assert ccp_issuer.jwks_requests == 2


def test_unreachable_issuer_rejects_tokens(api, ccp_issuer, project):
    token = viewer_token(ccp_issuer)
    ccp_issuer.close()
    response = get(api, token)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_refresh_survives_an_unreachable_issuer(ccp_issuer, settings):
    from tests.support.issuer import FakeIssuer

    down = FakeIssuer()
    down.close()
    settings.TRUSTED_ISSUERS = [down.config, ccp_issuer.config]
    tasks.refresh_trusted_jwks()
    assert ccp_issuer.jwks_requests == 1
