"""``manage.py`` in a fresh process under production's environment and nothing else,
for the tests of what start-up accepts and what it refuses."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

from tests.support.processes import ROOT

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
