"""Unauthenticated refusals (bad client credentials at the token endpoint, bad
bootstrap tokens at agent enrollment) are counted in the cache, not written as one
audit row each; the periodic summary writes one row per source and client id
with the count (decision 0031)."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest
import time_machine

from apps.core import audit
from apps.core.models import AuditEvent
from apps.core.tasks import summarise_denied_requests
from celery_worker.schedule import beat_schedule

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _inside_one_minute():
    """The counts are per minute: each test starts a second into one, its clock running."""
    window = audit.DENIED_WINDOW_SECONDS
    with time_machine.travel((time.time() // window + 1) * window + 1, tick=True):
        yield


def later() -> float:
    """A moment at which this minute has ended and been waited for."""
    return time.time() + audit.DENIED_WINDOW_SECONDS + audit.DENIED_GRACE_SECONDS


def ask_token(api, client_id: str, secret: str = "wrong", address: str = "203.0.113.9"):
    form = urlencode({"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
    return api.post(
        "/api/v1/auth/token", form, content_type="application/x-www-form-urlencoded", REMOTE_ADDR=address
    )


def denied(action: str):
    return AuditEvent.objects.filter(action=action, outcome=AuditEvent.Outcome.DENIED)


def test_bad_client_credentials_write_no_row_per_request(api):
    for _ in range(5):
        assert ask_token(api, "sa-guess").status_code == 401
    assert not denied("auth.token").exists()


def test_repeats_are_summarised_once_per_source_and_client(api):
    for _ in range(5):
        ask_token(api, "sa-guess")
    ask_token(api, "sa-other")
    ask_token(api, "sa-guess", address="198.51.100.7")

    assert audit.summarise_denied(now=later()) == 3
    rows = {(e.target_id, e.source_ip): e for e in denied("auth.token")}
    assert set(rows) == {
        ("sa-guess", "203.0.113.9"),
        ("sa-other", "203.0.113.9"),
        ("sa-guess", "198.51.100.7"),
    }
    flood = rows["sa-guess", "203.0.113.9"]
    assert flood.details["count"] == 5
    assert flood.details["reason"] == "bad client credentials"
    assert flood.actor == "anonymous"
    assert flood.details["from"] < flood.details["to"]
    assert flood.details["first_correlation_id"]
    assert rows["sa-other", "203.0.113.9"].details["count"] == 1
    # Summarised once: the next run (another beat, a retry) writes nothing again.
    assert audit.summarise_denied(now=later()) == 0
    assert denied("auth.token").count() == 3


def test_a_minute_that_has_not_ended_is_not_summarised(api):
    ask_token(api, "sa-guess")
    assert summarise_denied_requests.delay().get() == 0  # the periodic task, run eagerly
    assert not denied("auth.token").exists()


def test_beat_summarises_every_minute():
    [entry] = [e for e in beat_schedule().values() if e["task"] == summarise_denied_requests.name]
    assert entry["schedule"] == 60.0


def test_made_up_client_ids_beyond_the_bound_share_one_row(api, monkeypatch):
    monkeypatch.setattr(audit, "DENIED_KEYS_PER_WINDOW", 3)
    for n in range(10):
        ask_token(api, f"sa-random-{n}")
    assert not denied("auth.token").exists()
    audit.summarise_denied(now=later())
    rows = list(denied("auth.token"))
    assert len(rows) == 4
    assert sum(row.details["count"] for row in rows) == 10
    [shared] = [row for row in rows if row.target_id == "*"]
    assert shared.details["count"] == 7
    assert shared.source_ip is None


def test_bad_bootstrap_tokens_are_counted_too(api, db):
    for _ in range(3):
        refused = api.post(
            "/api/agent/v1/enroll", {"hostname": "gpu-x", "bootstrap_token": "guess"}, format="json"
        )
        assert refused.status_code == 401
    assert not denied("node.enroll").exists()
    audit.summarise_denied(now=later())
    [row] = denied("node.enroll")
    assert row.target_id == "gpu-x"
    assert row.details["count"] == 3
