"""Production settings pass Django's deployment checklist, and bad configuration
stops start-up with a message naming the variable. Each case runs ``manage.py``
in a fresh process, since settings are read once at start-up."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]
# Only what a production process gets: nothing from the test settings leaks in.
PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


def production_env(tmp_path: Path, **overrides: str | None) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "gpuaas.settings",
            "GPUAAS_VAR_DIR": str(tmp_path / "var"),
            "GPUAAS_DEBUG": "false",
            "GPUAAS_HTTPS": "true",
            "GPUAAS_SECRET_KEY": secrets.token_urlsafe(64),
            "GPUAAS_ENCRYPTION_KEYS": f"{Fernet.generate_key().decode()},{Fernet.generate_key().decode()}",
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/gpuaas",
            "REDIS_URL": "redis://127.0.0.1:6379/0",
            "GPUAAS_ALLOWED_HOSTS": "gpuaas.example.com",
            "GPUAAS_ISSUER": "https://gpuaas.example.com",
            "GPUAAS_APPS_DOMAIN": "apps.gpuaas.example.com",
            "GPUAAS_TRUSTED_ISSUERS": '[{"issuer": "https://sso.example.com/realms/ccp",'
            ' "jwks_uri": "https://sso.example.com/realms/ccp/protocol/openid-connect/certs",'
            ' "audience": "gpuaas"}]',
        }
    )
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


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


def _settings_value(tmp_path, expression: str, **overrides) -> subprocess.CompletedProcess:
    return manage(
        production_env(tmp_path, **overrides),
        "shell",
        "--no-imports",
        "-c",
        f"from django.conf import settings; print(repr(({expression})))",
    )


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
    result = manage(production_env(tmp_path, **overrides), "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert named in last_line, result.stderr


def test_file_variants_supply_values(tmp_path):
    key = secrets.token_urlsafe(64)
    fernet = Fernet.generate_key().decode()
    (tmp_path / "secret_key").write_text(key + "\n")  # trailing newline as editors and kubectl write it
    (tmp_path / "encryption_keys").write_text(fernet)
    (tmp_path / "hosts").write_text("a.example.com,b.example.com")
    (tmp_path / "debug").write_text("false")
    result = _settings_value(
        tmp_path,
        "settings.SECRET_KEY, settings.ENCRYPTION_KEYS, settings.ALLOWED_HOSTS, settings.DEBUG",
        GPUAAS_SECRET_KEY=None,
        GPUAAS_SECRET_KEY_FILE=str(tmp_path / "secret_key"),
        GPUAAS_ENCRYPTION_KEYS=None,
        GPUAAS_ENCRYPTION_KEYS_FILE=str(tmp_path / "encryption_keys"),
        GPUAAS_ALLOWED_HOSTS=None,
        GPUAAS_ALLOWED_HOSTS_FILE=str(tmp_path / "hosts"),
        GPUAAS_DEBUG=None,
        GPUAAS_DEBUG_FILE=str(tmp_path / "debug"),
    )
    assert result.returncode == 0, result.stderr
    hosts = ["a.example.com", "b.example.com", ".apps.gpuaas.example.com"]  # the apps domain's added
    assert result.stdout.strip() == repr((key, [fernet], hosts, False))


def test_file_variant_wins_over_the_plain_variable(tmp_path):
    (tmp_path / "secret_key").write_text("from-the-file-" + "x" * 50)
    result = _settings_value(
        tmp_path, "settings.SECRET_KEY", GPUAAS_SECRET_KEY_FILE=str(tmp_path / "secret_key")
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr("from-the-file-" + "x" * 50)


def test_production_mode_generates_no_secrets_into_var(tmp_path):
    result = manage(production_env(tmp_path), "check")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "var" / "secret_key").exists()
    assert not (tmp_path / "var" / "encryption_key").exists()


def test_behind_https_the_portals_cookies_are_host_prefixed(tmp_path):
    """``__Host-`` cookies are taken only from this exact origin (Secure, Path=/, no
    Domain): an app on a sibling host cannot set or shadow the portal's session."""
    names = "settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME"
    https = _settings_value(tmp_path, names)
    assert https.stdout.strip() == repr(("__Host-sessionid", "__Host-csrftoken")), https.stderr
    plain = _settings_value(tmp_path, names, GPUAAS_HTTPS="false")  # browsers refuse __Host- without TLS
    assert plain.stdout.strip() == repr(("sessionid", "csrftoken")), plain.stderr
