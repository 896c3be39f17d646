"""Password sign-in on the portal (/accounts/login/) and the admin (/admin/login/):
failures are logged (username and address, never the password), and a username or
client address that failed too often is refused, right password or not, with a 429
until its cool-off has passed. django-axes keeps the counts in the database."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Permission
from django.test import Client

from apps.core.models import AuditEvent
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PORTAL_LOGIN, ADMIN_LOGIN = "/accounts/login/", "/admin/login/"
ATTACKER, ELSEWHERE = "198.51.100.7", "203.0.113.9"


@pytest.fixture(autouse=True)
def _small_limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.LOGIN_FAILURES_PER_ADDRESS = 5


def sign_in(username: str, password: str, *, address: str = ATTACKER, path: str = PORTAL_LOGIN):
    return Client().post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_right_password_signs_in_and_a_wrong_one_gets_the_usual_error():
    UserFactory(username="alice")
    wrong = sign_in("alice", "wrong")
    assert wrong.status_code == 200
    assert b"Please enter a correct username and password" in wrong.content
    right = sign_in("alice", "pw")
    assert (right.status_code, right["Location"]) == (302, "/")


def test_too_many_failures_for_a_username_refuse_even_the_right_password_from_anywhere():
    UserFactory(username="alice")
    for address in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):  # a distributed guess at one account
        assert sign_in("alice", "guess", address=address).status_code == 200

    refused = sign_in("alice", "pw", address=ELSEWHERE)

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 900
    assert "Too many failed sign-in attempts. Try again in" in refused.content.decode()
    assert "_auth_user_id" not in refused.client.session
    UserFactory(username="bob")
    assert sign_in("bob", "pw", address=ELSEWHERE).status_code == 302  # others are not locked out


def test_too_many_failures_from_one_address_refuse_every_username_there():
    UserFactory(username="bob")
    for n in range(5):  # unknown usernames count like known ones
        assert sign_in(f"guess-{n}", "guess").status_code == 200

    assert sign_in("bob", "pw").status_code == 429
    assert sign_in("bob", "pw", address=ELSEWHERE).status_code == 302


def test_the_admin_login_is_limited_too(platform_admin):
    for _ in range(3):
        assert sign_in(platform_admin.username, "guess", path=ADMIN_LOGIN).status_code == 200

    refused = sign_in(platform_admin.username, "pw", path=ADMIN_LOGIN)

    assert refused.status_code == 429
    assert refused["Retry-After"]
    assert "Too many failed sign-in attempts" in refused.content.decode()
    assert sign_in(platform_admin.username, "pw", path=PORTAL_LOGIN).status_code == 429  # one count for both


def test_the_lockout_ends_when_its_cool_off_has_passed():
    UserFactory(username="alice")
    with time_machine.travel(datetime(2026, 3, 2, 9, 0, tzinfo=UTC), tick=False) as clock:
        for _ in range(3):
            sign_in("alice", "guess")
            clock.shift(timedelta(minutes=1))  # the lockout runs from the last failure
        refused = sign_in("alice", "pw")
        assert refused.status_code == 429
        assert refused["Retry-After"] == str(14 * 60 + 1)
        assert "Try again in 14 minute(s)." in refused.content.decode()

        clock.shift(timedelta(minutes=14))
        assert sign_in("alice", "pw").status_code == 429  # refusals do not extend it
        clock.shift(timedelta(seconds=1))

        assert sign_in("alice", "pw").status_code == 302


def test_a_failed_sign_in_is_logged_with_username_and_address_never_the_password(caplog):
    UserFactory(username="alice")
    with caplog.at_level(logging.WARNING, logger="gpuaas.auth"):
        sign_in("alice", "hunter2-secret")

    (line,) = [r for r in caplog.records if r.name == "gpuaas.auth"]
    assert (line.username, line.source_ip) == ("alice", ATTACKER)
    assert "hunter2-secret" not in caplog.text
    assert all("hunter2-secret" not in str(value) for value in vars(line).values())
    # Decision 0004: failed authentication is a log line, not an audit row.
    assert not AuditEvent.objects.exists()


def test_a_refused_sign_in_is_logged_as_refused(caplog):
    for _ in range(3):
        sign_in("alice", "guess")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpuaas.auth"):
        sign_in("alice", "guess")

    assert [r.getMessage() for r in caplog.records if r.name == "gpuaas.auth"] == [
        f"password sign-in refused after too many failures: 'alice' from {ATTACKER}"
    ]


def test_an_operator_lifts_a_users_lockout_in_the_admin_and_it_is_audited(platform_admin):
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    for address in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):
        sign_in("alice", "guess", address=address)
    assert sign_in("alice", "pw", address=ELSEWHERE).status_code == 429
    operator = Client()
    operator.force_login(platform_admin)

    response = operator.post(
        "/admin/auth/user/",
        {"action": "lift_sign_in_lockout", "_selected_action": [str(alice.pk), str(bob.pk)]},
        follow=True,
    )

    body = response.content.decode()
    assert "Lifted the sign-in lockout of 1: alice." in body
    assert "Not locked out: bob." in body
    assert sign_in("alice", "pw", address=ELSEWHERE).status_code == 302
    [event] = AuditEvent.objects.filter(action="user.sign_in_unlock")
    assert (event.actor, event.target_id) == (platform_admin.username, str(alice.pk))


def test_staff_who_may_not_change_users_cannot_lift_a_lockout():
    staff = UserFactory(username="helpdesk", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_user"))
    operator = Client()
    operator.force_login(staff)
    page = operator.get("/admin/auth/user/").content.decode()
    assert "lift_sign_in_lockout" not in page
