"""Production settings pass Django's deployment checklist, and bad configuration
stops start-up with a message naming the variable. The checklist and start-up run
``manage.py`` in a fresh process; the settings' values and refusals are read by
running the settings module in this process under the environment given (a process
a case cost a second of CPU, a sixth of `make check`'s subprocesses)."""

from __future__ import annotations

import os
import runpy
import secrets
from unittest import mock

import pytest
from cryptography.fernet import Fernet
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from tests.support.processes import ROOT
from tests.support.startup import manage, production_env


def test_deploy_check_reports_nothing_for_production_settings(tmp_path):
    result = manage(production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout  # axes.W002 is silenced on purpose (0039)
    assert "WARNING" not in result.stderr


def test_deploy_check_flags_plain_http_production(tmp_path):
    # The check is live: without GPUAAS_HTTPS the transport warnings come back.
    result = manage(
        production_env(tmp_path, GPUAAS_HTTPS="false"), "check", "--deploy", "--fail-level", "WARNING"
    )
    assert result.returncode != 0
    assert "security.W012" in result.stderr  # SESSION_COOKIE_SECURE


def settings_under(env: dict[str, str]) -> dict:
    """The settings module's names, as a process started with ``env`` (and nothing
    else) would read them."""
    with mock.patch.dict(os.environ, env, clear=True):
        return runpy.run_path(str(ROOT / "gpuaas" / "settings.py"))


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"GPUAAS_DEBUG": "maybe"}, "GPUAAS_DEBUG"),
        ({"GPUAAS_HTTPS": "si"}, "GPUAAS_HTTPS"),
        ({"GPUAAS_TRUSTED_ISSUERS": "not json"}, "GPUAAS_TRUSTED_ISSUERS"),
        ({"GPUAAS_TRUSTED_ISSUERS": '[{"issuer": "x"}]'}, "GPUAAS_TRUSTED_ISSUERS"),
        ({"GPUAAS_SECRET_KEY": None}, "GPUAAS_SECRET_KEY"),
        ({"GPUAAS_ENCRYPTION_KEYS": None}, "GPUAAS_ENCRYPTION_KEYS"),
        ({"GPUAAS_ENCRYPTION_KEYS": "too-short"}, "GPUAAS_ENCRYPTION_KEYS"),
        ({"DATABASE_URL": "nosuchdb://x"}, "DATABASE_URL"),
        ({"GPUAAS_DRIVERS": "imaginary"}, "GPUAAS_DRIVERS"),
        ({"GPUAAS_SIMULATED_STEP_SECONDS": "fast"}, "GPUAAS_SIMULATED_STEP_SECONDS"),
        ({"GPUAAS_TOKEN_LIFETIME_SECONDS": "86400"}, "GPUAAS_TOKEN_LIFETIME_SECONDS"),
        ({"GPUAAS_SECRETS_BACKEND": "consul"}, "GPUAAS_SECRETS_BACKEND"),
        ({"GPUAAS_SECRETS_BACKEND": "vault"}, "GPUAAS_VAULT_ADDR"),
        (
            {"GPUAAS_SECRETS_BACKEND": "vault", "GPUAAS_VAULT_ADDR": "https://bao.example.com"},
            "GPUAAS_VAULT_TOKEN",
        ),
        ({"GPUAAS_VAULT_ADDR": "bao.example.com:8200"}, "GPUAAS_VAULT_ADDR"),
        ({"GPUAAS_VAULT_MOUNT": "kv/nested"}, "GPUAAS_VAULT_MOUNT"),
        ({"GPUAAS_VAULT_PREFIX": "/gpuaas"}, "GPUAAS_VAULT_PREFIX"),
        (
            {
                "GPUAAS_SECRETS_BACKEND": "vault",
                "GPUAAS_VAULT_ADDR": "https://bao.example.com",
                "GPUAAS_VAULT_TOKEN_FILE": "/nonexistent/token",
            },
            "GPUAAS_VAULT_TOKEN_FILE",
        ),
        (
            {"GPUAAS_SECRET_KEY": None, "GPUAAS_SECRET_KEY_FILE": "/nonexistent/secret"},
            "GPUAAS_SECRET_KEY_FILE",
        ),
    ],
    ids=lambda value: "-".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else value,
)
def test_bad_configuration_stops_start_up_naming_the_variable(tmp_path, overrides, named):
    with pytest.raises(ImproperlyConfigured) as stopped:
        settings_under(production_env(tmp_path, **overrides))
    assert named in str(stopped.value)


def test_manage_py_stops_with_the_variable_on_its_last_line(tmp_path):
    result = manage(production_env(tmp_path, GPUAAS_DEBUG="maybe"), "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert "GPUAAS_DEBUG" in last_line, result.stderr


def test_file_variants_supply_values(tmp_path):
    key = secrets.token_urlsafe(64)
    fernet = Fernet.generate_key().decode()
    (tmp_path / "secret_key").write_text(key + "\n")  # trailing newline as editors and kubectl write it
    (tmp_path / "encryption_keys").write_text(fernet)
    (tmp_path / "hosts").write_text("a.example.com,b.example.com")
    (tmp_path / "debug").write_text("false")
    read = settings_under(
        production_env(
            tmp_path,
            GPUAAS_SECRET_KEY=None,
            GPUAAS_SECRET_KEY_FILE=str(tmp_path / "secret_key"),
            GPUAAS_ENCRYPTION_KEYS=None,
            GPUAAS_ENCRYPTION_KEYS_FILE=str(tmp_path / "encryption_keys"),
            GPUAAS_ALLOWED_HOSTS=None,
            GPUAAS_ALLOWED_HOSTS_FILE=str(tmp_path / "hosts"),
            GPUAAS_DEBUG=None,
            GPUAAS_DEBUG_FILE=str(tmp_path / "debug"),
        )
    )
    hosts = ["a.example.com", "b.example.com", ".apps.gpuaas.example.com"]  # the apps domain's added
    assert (read["SECRET_KEY"], read["ENCRYPTION_KEYS"], read["ALLOWED_HOSTS"], read["DEBUG"]) == (
        key,
        [fernet],
        hosts,
        False,
    )


def test_file_variant_wins_over_the_plain_variable(tmp_path):
    (tmp_path / "secret_key").write_text("from-the-file-" + "x" * 50)
    read = settings_under(production_env(tmp_path, GPUAAS_SECRET_KEY_FILE=str(tmp_path / "secret_key")))
    assert read["SECRET_KEY"] == "from-the-file-" + "x" * 50


def test_production_mode_generates_no_secrets_into_var(tmp_path):
    result = manage(production_env(tmp_path), "check")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "var" / "secret_key").exists()
    assert not (tmp_path / "var" / "encryption_key").exists()


def test_behind_https_the_portals_cookies_are_host_prefixed(tmp_path):
    """``__Host-`` cookies are taken only from this exact origin (Secure, Path=/, no
    Domain): an app on a sibling host cannot set or shadow the portal's session."""

    def cookie_names(read: dict) -> tuple[str, str]:  # Django's defaults where the module sets none
        names = ("SESSION_COOKIE_NAME", "CSRF_COOKIE_NAME")
        return tuple(read.get(name, getattr(global_settings, name)) for name in names)

    assert cookie_names(settings_under(production_env(tmp_path))) == ("__Host-sessionid", "__Host-csrftoken")
    # Browsers refuse __Host- without TLS.
    assert cookie_names(settings_under(production_env(tmp_path, GPUAAS_HTTPS="false"))) == (
        "sessionid",
        "csrftoken",
    )
