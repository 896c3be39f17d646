"""The embedded default keeps its secrets to its owner and to loopback: var/ is
private, and ``serve`` will not expose the local agent's host to a network."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def embedded_env(var_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GPUAAS_")
        and key not in ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    return {**env, "GPUAAS_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "gpuaas.settings"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_var_is_private_and_so_is_what_is_created_in_it(tmp_path):
    var_dir = tmp_path / "var"
    var_dir.mkdir(mode=0o755)  # an existing, too open var/ is tightened
    # Migrating one app creates and writes the database as migrating all of them would
    # (all ~90 migrations take 6 CPU-s on SQLite, 2026-11-29).
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "contenttypes", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=embedded_env(var_dir),
        check=True,
        capture_output=True,
    )
    assert mode(var_dir) == 0o700
    for name in ("secret_key", "encryption_key", "gpuaas.sqlite3"):
        assert mode(var_dir / name) == 0o600, name


def test_serve_refuses_to_run_the_local_agent_beyond_loopback(tmp_path):
    refused = subprocess.run(
        [sys.executable, "manage.py", "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=ROOT,
        env=embedded_env(tmp_path / "var"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "serves only on loopback" in refused.stderr
    assert "not 0.0.0.0" in refused.stderr
