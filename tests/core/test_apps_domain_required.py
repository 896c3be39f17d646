"""Production serves apps from their own origins: without ``GPUAAS_APPS_DOMAIN`` it
does not start, unless an operator accepts the risk, and then every operator page
says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import UserFactory
from tests.support.members import member

ROOT = Path(__file__).resolve().parents[2]


def check(*command: str, **variables: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUAAS_")}
    env.update(
        DJANGO_SETTINGS_MODULE="gpuaas.settings",
        REDIS_URL="redis://127.0.0.1:6379/0",
        GPUAAS_SECRET_KEY="x" * 50,
        GPUAAS_ENCRYPTION_KEYS="7qWutnD6fSYzo4mOWFApzU7RMK8droX-w4WLUJ5hkGc=",
        **variables,
    )
    return subprocess.run(
        [sys.executable, "manage.py", *(command or ["check"])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_without_an_apps_domain_does_not_start():
    refused = check()
    assert refused.returncode != 0
    assert "GPUAAS_APPS_DOMAIN: required in production" in refused.stderr
    assert check(GPUAAS_APPS_DOMAIN="apps.example.com").returncode == 0
    assert check(GPUAAS_PATH_ROUTES="accept-risk").returncode == 0
    wrong = check(GPUAAS_PATH_ROUTES="yes")
    assert wrong.returncode != 0
    assert "GPUAAS_PATH_ROUTES: the only value is accept-risk" in wrong.stderr


def test_the_portal_answers_for_its_apps_domain_when_the_hosts_list_leaves_it_out():
    """nginx asks the portal about an app host's request with that Host: an operator's
    GPUAAS_ALLOWED_HOSTS naming only the portal must not turn every app into a 400."""
    answered = check(
        "shell",
        "-c",
        "from django.conf import settings; from django.http.request import validate_host; "
        "print([validate_host(h, settings.ALLOWED_HOSTS) for h in "
        "('i-1.apps.example.com', 'portal.example.com', 'evil.example.com')])",
        GPUAAS_APPS_DOMAIN="apps.example.com",
        GPUAAS_ALLOWED_HOSTS="portal.example.com",
    )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip().splitlines()[-1] == "[True, True, False]"


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["/", "/admin/"])
def test_operators_are_warned_on_every_page_while_apps_share_the_portals_origin(client, settings, page):
    operator = UserFactory(is_superuser=True, is_staff=True)
    client.force_login(operator)
    settings.PATH_ROUTES_RISK_ACCEPTED = True
    assert 'id="path-routes-warning"' in client.get(page).content.decode()
    settings.PATH_ROUTES_RISK_ACCEPTED = False  # an apps domain is set
    assert 'id="path-routes-warning"' not in client.get(page).content.decode()


@pytest.mark.django_db
def test_tenant_users_are_not_shown_the_operators_warning(client, settings, tenant):
    settings.PATH_ROUTES_RISK_ACCEPTED = True
    client.force_login(member("tenant_admin", tenant=tenant))
    page = client.get("/")
    assert page.status_code == 200
    assert 'id="path-routes-warning"' not in page.content.decode()
