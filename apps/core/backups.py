"""Backups of the platform's data: its database and an export of its secrets store.

A backup is a directory ``<UTC timestamp>/`` (under ``var/backups/`` unless told
otherwise), readable by its owner only:

- ``database.pgdump`` (``pg_dump -Fc``) or ``database.sqlite3`` (SQLite's online
  backup of the embedded default);
- ``secrets.json`` when the secrets store is OpenBao/Vault: every secret of the
  platform, each encrypted with ``GPUAAS_ENCRYPTION_KEYS`` (the ``local`` store's
  secrets are rows of the database, encrypted the same way, so the dump holds them);
- ``manifest.json``: what the backup holds, and a value encrypted with the newest key
  so a restore refuses at once when the keys it is given cannot read the secrets.

The keys are never in a backup: a stolen backup reveals no secret, and a backup is
useless without them (docs/operations.md).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import InvalidToken
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from apps.core import audit, crypto, secrets

FORMAT = 1
MANIFEST = "manifest.json"
SECRETS = "secrets.json"
DUMPS = {"postgresql": "database.pgdump", "sqlite": "database.sqlite3"}
_KEY_CHECK = "gpuaas backup key check"


class BackupError(Exception):
    """A backup or restore that cannot be done; the message says what to do."""


@dataclass
class Restored:
    database: str
    secrets: int  # written into the configured secrets store from ``secrets.json``
    unapplied_migrations: int  # the code is newer than the backup: ``manage.py migrate``


def default_root() -> Path:
    return settings.VAR_DIR / "backups"


def _vendor() -> str:
    if connection.vendor not in DUMPS:
        raise BackupError(f"backups support PostgreSQL and SQLite, not {connection.vendor}")
    return connection.vendor


def _pg_env() -> dict[str, str]:
    """libpq's variables for the configured database: the password never on a command line."""
    db = connection.settings_dict
    values = {
        "PGHOST": db.get("HOST") or "",
        "PGPORT": str(db.get("PORT") or ""),
        "PGUSER": db.get("USER") or "",
        "PGPASSWORD": db.get("PASSWORD") or "",
        "PGDATABASE": db["NAME"],
        "PGSSLMODE": (db.get("OPTIONS") or {}).get("sslmode", ""),
    }
    return {**os.environ, **{name: value for name, value in values.items() if value}}


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, env=_pg_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _sqlite_copy(source: str | Path, target: str | Path) -> None:
    """SQLite's online backup: a consistent copy while the portal keeps writing."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _export_secrets(store) -> dict[str, str]:
    exported = {}
    for path in store.paths():
        try:
            exported[path] = crypto.encrypt(store.read(path))
        except secrets.SecretNotFound:
            continue  # deleted since it was listed
    return exported


def _applied_migrations() -> dict[str, str]:
    executor = MigrationExecutor(connection)
    latest: dict[str, str] = {}
    for app, name in sorted(executor.loader.applied_migrations):
        latest[app] = max(latest.get(app, ""), name)
    return latest


def create(root: Path | None = None) -> Path:
    """A backup of the configured database and secrets store; its directory."""
    vendor = _vendor()
    os.umask(0o077)
    root = Path(root or default_root())
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    final = root / stamp
    if final.exists():
        raise BackupError(f"{final} exists already: wait a second and run it again")
    # Written under another name and renamed once complete: a directory with the
    # timestamp's name is always a whole backup.
    partial = root / f".{stamp}.partial"
    partial.mkdir(mode=0o700)
    try:
        exported = _write(partial, vendor)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(final)
    audit.record(
        None,
        "backup.create",
        details={"backup": stamp, "database": vendor, "secrets_exported": len(exported)},
    )
    return final


def _write(into: Path, vendor: str) -> dict[str, str]:
    """The dump, the secrets' export and the manifest into ``into``; the export."""
    dump = into / DUMPS[vendor]
    if vendor == "postgresql":
        _run(["pg_dump", "--format=custom", "--file", str(dump)], "pg_dump")
    else:
        _sqlite_copy(connection.settings_dict["NAME"], dump)
    # After the dump: the store is written before the record naming a secret commits,
    # so every secret a dumped record names is exported (a record deleted meanwhile may
    # lose its secret: its deletion follows the commit).
    exported = {}
    if settings.SECRETS_BACKEND != "local":
        exported = _export_secrets(secrets.store())
        (into / SECRETS).write_text(json.dumps({"backend": settings.SECRETS_BACKEND, "secrets": exported}))
    manifest = {
        "format": FORMAT,
        "created_at": timezone.now().isoformat(),
        "database": vendor,
        "secrets_backend": settings.SECRETS_BACKEND,
        "secrets_exported": len(exported),
        "migrations": _applied_migrations(),
        "key_check": crypto.encrypt(_KEY_CHECK),
    }
    (into / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return exported


def _manifest(source: Path) -> dict:
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source} is not a backup: no readable {MANIFEST} ({exc})") from exc
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{source}: backup format {manifest.get('format')!r}, this code reads {FORMAT}")
    try:
        crypto.decrypt(manifest["key_check"])
    except InvalidToken:
        raise BackupError(
            "GPUAAS_ENCRYPTION_KEYS cannot read this backup's secrets: set it to the keys of the "
            "platform that made the backup (the embedded default keeps its key in var/encryption_key)"
        ) from None
    return manifest


def _is_empty() -> bool:
    return not connection.introspection.table_names()


def restore(source: Path, *, force: bool = False) -> Restored:
    """The backup at ``source`` into the configured database (empty, unless ``force``)
    and its exported secrets into the configured secrets store."""
    source = Path(source)
    manifest = _manifest(source)
    vendor = _vendor()
    if manifest["database"] != vendor:
        raise BackupError(f"this backup is of a {manifest['database']} database; DATABASE_URL is {vendor}")
    if not force and not _is_empty():
        raise BackupError(
            f"the database {connection.settings_dict['NAME']} is not empty: restore into a new "
            "database, or pass --force to replace its contents"
        )
    dump = source / DUMPS[vendor]
    connection.close()
    if vendor == "postgresql":
        # One transaction: a restore that fails leaves the database as it was.
        command = ["pg_restore", "--no-owner", "--no-privileges", "--single-transaction"]
        command += ["--clean", "--if-exists"] if force else []
        _run([*command, "--dbname", connection.settings_dict["NAME"], str(dump)], "pg_restore")
    else:
        _sqlite_copy(dump, connection.settings_dict["NAME"])
    written = 0
    if (source / SECRETS).exists():
        store = secrets.store()
        for path, token in json.loads((source / SECRETS).read_text())["secrets"].items():
            store.write(path, crypto.decrypt(token))
            written += 1
    executor = MigrationExecutor(connection)
    unapplied = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    if not unapplied:  # else the audit table may lack columns until ``migrate`` runs
        audit.record(
            None,
            "backup.restore",
            details={
                "backup": source.name,
                "created_at": manifest["created_at"],
                "secrets_restored": written,
            },
        )
    return Restored(database=vendor, secrets=written, unapplied_migrations=unapplied)
