"""The container files are consistent with the contract: no Docker engine runs in
CI, so check what can be checked without one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apps.core import asgiserver
from gpuaas import prodlocal

DOCKER = Path(__file__).resolve().parents[2] / "docker"
APP_SERVICES = ("migrate", "web", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_runs_the_production_stack(compose):
    assert set(compose["services"]) >= {"postgres", "redis", "web", "worker", "beat", "nginx", "migrate"}
    worker, beat = compose["services"]["worker"], compose["services"]["beat"]
    assert worker["entrypoint"] + worker["command"][:1] == ["celery", "-A", "gpuaas", "worker"]
    assert beat["entrypoint"] + beat["command"][:1] == ["celery", "-A", "gpuaas", "beat"]
    assert compose["services"]["web"]["command"][:3] == ["serve", "--host", "0.0.0.0"]


@pytest.mark.parametrize("service", APP_SERVICES)
def test_app_services_get_the_production_environment(compose, service):
    env = compose["services"][service]["environment"]
    for name in (
        "DATABASE_URL",
        "REDIS_URL",
        "GPUAAS_SECRET_KEY",
        "GPUAAS_ENCRYPTION_KEYS",
        "GPUAAS_ALLOWED_HOSTS",
        "GPUAAS_DEBUG",
        "GPUAAS_HTTPS",
        "GPUAAS_ISSUER",
        "GPUAAS_TRUSTED_ISSUERS",
        "GPUAAS_SECRETS_BACKEND",
        "GPUAAS_VAULT_ADDR",
        "GPUAAS_VAULT_TOKEN",
    ):
        assert name in env, f"{service} lacks {name}"
    assert env["GPUAAS_DEBUG"] == "false"
    # Secrets have no defaults: compose refuses to start without them.
    assert re.search(r"\$\{GPUAAS_SECRET_KEY:\?", env["GPUAAS_SECRET_KEY"])
    assert re.search(r"\$\{GPUAAS_ENCRYPTION_KEYS:\?", env["GPUAAS_ENCRYPTION_KEYS"])


def test_app_services_start_after_migrations(compose):
    for service in ("web", "worker", "beat"):
        depends = compose["services"][service]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["postgres"]["condition"] == "service_healthy"


def test_health_checks_use_the_probe_endpoints(compose):
    assert "/readyz" in " ".join(compose["services"]["web"]["healthcheck"]["test"])
    assert "/healthz" in " ".join(compose["services"]["nginx"]["healthcheck"]["test"])
    assert "/healthz" in (DOCKER / "Dockerfile").read_text()
    # Worker and beat do not serve HTTP: the image's check must not apply to them.
    assert "inspect ping" in " ".join(compose["services"]["worker"]["healthcheck"]["test"])
    assert "celerybeat-schedule" in " ".join(compose["services"]["beat"]["healthcheck"]["test"])


def test_every_service_is_checked_and_restarted(compose):
    """As supervisord restarts each process of `make prod-local` that exits; only the
    migrations, a job that runs once per deployment, end for good."""
    for name, service in compose["services"].items():
        if name == "migrate":
            assert service["restart"] == "no"
            continue
        assert service["restart"] == "unless-stopped", name
        assert service["healthcheck"].get("test"), name
        assert not service["healthcheck"].get("disable"), name


def test_prod_local_runs_the_processes_of_compose_with_its_variables(compose, tmp_path, monkeypatch):
    """`make prod-local` (gpuaas/prodlocal.py) is compose without Docker: a program for
    each long-running app service and nginx, and no variable compose does not set."""
    for name in list(os.environ):
        if name.startswith("GPUAAS_") or name in ("DATABASE_URL", "REDIS_URL"):
            monkeypatch.delenv(name)
    conf = prodlocal.supervisord_conf(tmp_path, [8001, 8002])
    programs = set(re.findall(r"^\[program:([a-z]+)\d*\]$", conf, re.M))
    assert programs | {"migrate"} == set(APP_SERVICES) | {"nginx"}

    variables = set(prodlocal.environment(tmp_path / "state", 8080))
    # Settings compose leaves to the image or the defaults: where the state lives, and
    # which settings module the process reads (the image's DJANGO_SETTINGS_MODULE), where
    # the log lines go (the image's GPUAAS_LOG_FORMAT).
    local_only = {"DJANGO_SETTINGS_MODULE", "GPUAAS_VAR_DIR", "GPUAAS_CELERY_EAGER", "GPUAAS_LOG_FORMAT"}
    assert variables - local_only <= set(compose["services"]["web"]["environment"])


def test_every_process_of_a_run_agrees_on_the_static_files_collected(monkeypatch):
    """Topologies share one collection, made again only when the sources change: a
    process with the checkout on sys.path (``python -m``, its egg-info there) must
    see the same sources as one without, or it collects under a server reading them."""
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != prodlocal.ROOT]
    monkeypatch.setattr(sys, "path", elsewhere)
    without_the_checkout = prodlocal.static_sources()
    monkeypatch.setattr(sys, "path", [str(prodlocal.ROOT), *elsewhere])
    assert prodlocal.static_sources() == without_the_checkout


def tool(name: str) -> str:
    """A linter the dev extras install into the virtualenv (pyproject.toml)."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def test_compose_file_follows_the_compose_specification():
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(DOCKER / "compose.yaml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "dockerfile", sorted(path.name for path in DOCKER.glob("Dockerfile*") if path.suffix != ".dockerignore")
)
def test_dockerfiles_pass_hadolint(dockerfile):
    result = subprocess.run(
        [tool("hadolint"), "--config", str(DOCKER / ".hadolint.yaml"), str(DOCKER / dockerfile)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_non_root_and_serves_on_all_interfaces():
    text = (DOCKER / "Dockerfile").read_text()
    assert text.startswith("#")
    assert "FROM python:3.11-slim" in text
    assert re.search(r"^USER gpuaas$", text, re.M)
    assert "collectstatic" in text
    assert "pip install" in text
    assert 'CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]' in text


def test_compose_fills_every_placeholder_of_the_nginx_template(compose):
    """nginx.conf is a template (tests/proxy/test_nginx.py runs it); compose must give
    the nginx image every value it names, and point it at the portal."""
    placeholders = set(re.findall(r"\$\{(GPUAAS_[A-Z_]+)\}", (DOCKER / "nginx.conf").read_text()))
    environment = compose["services"]["nginx"]["environment"]
    assert placeholders <= set(environment), placeholders - set(environment)
    assert environment["GPUAAS_PORTAL_UPSTREAM"] == "web:8000"
    assert environment["NGINX_ENVSUBST_FILTER"] == "^GPUAAS_"


def test_nginx_lets_go_of_idle_upstream_connections_before_uvicorn_does():
    """A connection uvicorn closes as nginx sends a request on it fails that request,
    and nginx counts the web process down for 10 s: the CI's 502 under a busy host."""
    conf = (DOCKER / "nginx.conf").read_text()
    upstreams = dict(re.findall(r"\n    upstream (\w+) \{\n(.*?)\n    \}", conf, re.DOTALL))
    assert {"gpuaas_web", "gpuaas_apps"} <= set(upstreams)
    for name, body in upstreams.items():
        held = re.search(r"keepalive_timeout (\d+)s;", body)
        assert held, f"{name} keeps connections nginx's default 60 s"
        assert int(held.group(1)) < asgiserver.OPTIONS["timeout_keep_alive"], name


def test_env_example_names_every_variable_compose_reads():
    """docker/env.example is where an operator learns what to set: compose reading a
    variable it does not list is a setting nobody finds."""
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (DOCKER / "compose.yaml").read_text()))
    listed = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", (DOCKER / "env.example").read_text(), re.M))
    assert read - listed == set()
