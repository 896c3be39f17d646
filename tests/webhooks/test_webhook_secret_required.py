"""Webhooks to CCP are never signed with an empty key: a webhook URL without its
secret stops start-up naming the missing variable. Each case starts ``manage.py``
in a fresh process, since settings are read once at start-up."""

from __future__ import annotations

import os

from tests.support.startup import PASSED_THROUGH, manage, production_env

CCP = "https://ccp.example.com"


def test_a_webhook_url_without_a_secret_stops_start_up(tmp_path):
    result = manage(production_env(tmp_path, GPUAAS_CCP_WEBHOOK_URL=CCP), "check")

    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured" in last_line
    assert "GPUAAS_CCP_WEBHOOK_SECRET: required when GPUAAS_CCP_WEBHOOK_URL is set" in last_line


def test_a_webhook_url_with_its_secret_starts(tmp_path):
    secret_file = tmp_path / "webhook_secret"
    secret_file.write_text("shared-with-ccp\n")
    env = production_env(
        tmp_path, GPUAAS_CCP_WEBHOOK_URL=CCP, GPUAAS_CCP_WEBHOOK_SECRET_FILE=str(secret_file)
    )

    result = manage(env, "check")

    assert result.returncode == 0, result.stderr


def test_the_embedded_default_without_webhooks_starts(tmp_path):
    # What `make run` gets: no configuration at all.
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env["GPUAAS_VAR_DIR"] = str(tmp_path / "var")

    result = manage(env, "check")

    assert result.returncode == 0, result.stderr
