"""The backup drill (issue 20): what the platform holds is backed up with the real
``manage.py backup``, restored with ``manage.py restore`` into a new, empty database
(and, for OpenBao, an empty secrets store), and a portal started on it serves the same
tenants, allocations and audit trail, and the same secrets: a token signed before
the backup still signs in, and the project's secret has its value. On PostgreSQL
with each secrets-store backend, and on the embedded default (SQLite).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.db import connection

from apps.access import services as access
from apps.core.models import AuditEvent
from apps.tenancy import services as tenancy
from apps.tenancy.principal import for_user
from apps.tenancy.roles import Role
from tests.factories import AllocationFactory, ProjectFactory, TenantFactory, UserFactory
from tests.support.processes import PRODUCTION_ENV, ROOT, Server, free_port

pytestmark = pytest.mark.heavy

SECRET_NAME, SECRET_VALUE = "db-password", "drill-value-0f-a-secret"


@dataclass
class Seeded:
    tenant_id: str
    tenant_name: str
    project_id: str
    allocation_ids: list[str]
    audit_ids: set[int]
    token: str  # signed before the backup, with the key the secrets store holds
    client_id: str
    client_secret: str


def _seed() -> Seeded:
    operator = for_user(UserFactory(is_superuser=True, is_staff=True))
    platform = tenancy.create_platform_service_account(None, name="drill-operator", role=Role.PLATFORM_ADMIN)
    tenant = TenantFactory(name="Drill tenant")
    project = ProjectFactory(tenant=tenant)
    tenancy.create_service_account(operator, project, name="drill-bot", role="viewer")
    access.put_secret(operator, project, name=SECRET_NAME, value=SECRET_VALUE)
    allocations = [AllocationFactory(project=project), AllocationFactory(project=project)]
    token, _ = tenancy.issue_token(platform.account.client_id, platform.client_secret)
    return Seeded(
        tenant_id=str(tenant.pk),
        tenant_name=tenant.name,
        project_id=str(project.pk),
        allocation_ids=sorted(str(allocation.pk) for allocation in allocations),
        audit_ids=set(AuditEvent.objects.values_list("pk", flat=True)),
        token=token,
        client_id=platform.account.client_id,
        client_secret=platform.client_secret,
    )


def _database_url(name: str) -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


@pytest.fixture
def fresh_database():
    """A new, empty PostgreSQL database, dropped afterwards."""
    name = f"gpuaas_drill_{uuid.uuid4().hex[:12]}"
    db = connection.settings_dict
    admin = psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db.get("PASSWORD") or None,
        dbname="postgres",
        autocommit=True,
    )
    admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def _platform_env(database: str, var_dir: Path, vault_prefix: str) -> dict[str, str]:
    """The platform's environment on ``database`` with the test's secrets store (under
    ``vault_prefix`` in OpenBao: another prefix is an empty store)."""
    env = {
        **PRODUCTION_ENV,
        "DATABASE_URL": _database_url(database),
        "GPUAAS_VAR_DIR": str(var_dir),
        "GPUAAS_ISSUER": settings.ISSUER,  # the tokens signed before the backup name it
        "GPUAAS_SECRETS_BACKEND": settings.SECRETS_BACKEND,
    }
    if settings.SECRETS_BACKEND == "vault":
        env |= {
            "GPUAAS_VAULT_ADDR": settings.VAULT_ADDR,
            "GPUAAS_VAULT_TOKEN": settings.VAULT_TOKEN,
            "GPUAAS_VAULT_PREFIX": vault_prefix,
        }
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _all_pages(api: httpx.Client, path: str) -> list[dict]:
    found, url = [], f"{path}?page_size=500"
    while url:
        answer = api.get(url)
        assert answer.status_code == 200, answer.text[:500]
        found += answer.json()["results"]
        url = answer.json()["next"]
    return found


def _assert_serves(portal: Server, seeded: Seeded) -> None:
    api = httpx.Client(base_url=portal.url, timeout=30)
    api.headers["Authorization"] = f"Bearer {seeded.token}"

    tenant = api.get(f"/api/v1/tenants/{seeded.tenant_id}")
    assert tenant.status_code == 200, tenant.text[:500]
    assert tenant.json()["name"] == seeded.tenant_name

    allocations = _all_pages(api, f"/api/v1/projects/{seeded.project_id}/allocations")
    assert sorted(allocation["id"] for allocation in allocations) == seeded.allocation_ids

    events = {event["id"]: event["action"] for event in _all_pages(api, "/api/v1/audit")}
    assert seeded.audit_ids <= set(events)
    # The one event the backup does not hold: the restore's own.
    assert [events[pk] for pk in set(events) - seeded.audit_ids] == ["backup.restore"]

    # The service account's secret is checked against its hash in the database; the
    # new token is signed with the key the secrets store gave back.
    fresh = api.post(
        "/api/v1/auth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": seeded.client_id,
            "client_secret": seeded.client_secret,
        },
    )
    assert fresh.status_code == 200, fresh.text[:500]


@pytest.mark.production
def test_a_backup_restored_into_a_new_database_serves_the_same_platform(
    transactional_db, secrets_backend, fresh_database, redis_server, tmp_path
):
    seeded = _seed()
    source = _platform_env(connection.settings_dict["NAME"], tmp_path / "var", settings.VAULT_PREFIX)
    made = Path(_ok(_manage(source, "backup", "--output", str(tmp_path / "backups"))).strip())
    assert made.parent == tmp_path / "backups"
    assert sorted(p.name for p in made.iterdir()) == sorted(
        ["database.pgdump", "manifest.json"] + (["secrets.json"] if secrets_backend == "vault" else [])
    )
    assert (made.stat().st_mode & 0o777) == 0o700
    # Nothing in the backup reads as the secret: the export is encrypted like the store.
    for part in made.iterdir():
        assert SECRET_VALUE.encode() not in part.read_bytes()
    assert AuditEvent.objects.filter(action="backup.create", details__backup=made.name).exists()

    # The new platform: an empty database, and (for OpenBao) a prefix nothing was written to.
    target = _platform_env(fresh_database, tmp_path / "restored-var", f"restored-{uuid.uuid4().hex}/")
    restored = _ok(_manage(target, "restore", str(made)))
    assert "restored" in restored
    again = _manage(target, "restore", str(made))
    assert again.returncode != 0
    assert "not empty" in again.stderr
    assert "--force" in again.stderr
    # Forced, it replaces what the database holds (the first restore's audit event too).
    _ok(_manage(target, "restore", "--force", str(made)))
    _ok(_manage(target, "migrate", "--check"))

    secret = _ok(
        _manage(
            target,
            "shell",
            "-c",
            "from apps.access.selectors import project_secret_value; "
            f"print(project_secret_value({seeded.project_id!r}, {SECRET_NAME!r}))",
        )
    )
    assert secret.strip().splitlines()[-1] == SECRET_VALUE  # after the shell's banner

    env = {**target, "REDIS_URL": redis_server.url}
    portal = Server(free_port(), env, workers=1, log_path=tmp_path / "serve.log")
    try:
        portal.wait_ready()
        _assert_serves(portal, seeded)
    finally:
        portal.stop()


@pytest.mark.production
def test_a_restore_refuses_keys_that_cannot_read_the_backup(transactional_db, fresh_database, tmp_path):
    TenantFactory()
    source = _platform_env(connection.settings_dict["NAME"], tmp_path / "var", "")
    made = Path(_ok(_manage(source, "backup", "--output", str(tmp_path / "backups"))).strip())
    other_key = Fernet.generate_key().decode()
    target = _platform_env(fresh_database, tmp_path / "restored-var", "") | {
        "GPUAAS_ENCRYPTION_KEYS": other_key
    }
    refused = _manage(target, "restore", str(made))
    assert refused.returncode != 0
    assert "GPUAAS_ENCRYPTION_KEYS" in refused.stderr
    # Nothing was written: the right keys restore into the same database afterwards.
    _ok(_manage({**target, "GPUAAS_ENCRYPTION_KEYS": settings.ENCRYPTION_KEYS[0]}, "restore", str(made)))


@pytest.fixture
def embedded(monkeypatch):
    """The embedded default's environment for the commands and the portal this test
    starts (they inherit the test's): SQLite in the var directory given, with the keys
    generated there."""
    for key in list(os.environ):
        if key.startswith("GPUAAS_") or key in ("REDIS_URL", "DATABASE_URL"):
            monkeypatch.delenv(key)
    return lambda var_dir: {"GPUAAS_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "gpuaas.settings"}


def test_the_embedded_default_is_restored_with_its_key_file(embedded, tmp_path):
    """The SQLite default: the backup holds the database, not ``var/encryption_key``;
    a new install restores it once that file is copied over."""
    first, second = tmp_path / "first", tmp_path / "second"
    _ok(_manage(embedded(first), "migrate", "--noinput", "-v", "0"))
    printed = _ok(
        _manage(
            embedded(first),
            "shell",
            "-c",
            "import dataclasses, json; from tests.ops.test_backup_drill import _seed; "
            "print(json.dumps(dataclasses.asdict(_seed()), default=sorted))",
        )
    )
    seeded = json.loads(printed.strip().splitlines()[-1])
    seeded = Seeded(**seeded | {"audit_ids": set(seeded["audit_ids"])})
    made = Path(_ok(_manage(embedded(first), "backup")).strip())
    assert made.parent == first / "backups"
    assert sorted(p.name for p in made.iterdir()) == ["database.sqlite3", "manifest.json"]

    # A new install generates a key of its own: the restore says which key it needs.
    refused = _manage(embedded(second), "restore", str(made))
    assert refused.returncode != 0
    assert "var/encryption_key" in refused.stderr
    (second / "encryption_key").write_text((first / "encryption_key").read_text())
    _ok(_manage(embedded(second), "restore", str(made)))
    _ok(_manage(embedded(second), "migrate", "--check"))

    portal = Server(free_port(), embedded(second), workers=1, log_path=tmp_path / "serve.log")
    try:
        portal.wait_ready()
        _assert_serves(portal, seeded)
    finally:
        portal.stop()
