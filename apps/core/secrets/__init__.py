"""The secrets store: the one place the value of a platform secret lives.

Records elsewhere keep the path of their secret (``runtime/instances/<id>/token``),
never its value or ciphertext. ``GPUAAS_SECRETS_BACKEND`` picks the backend:
``local`` (the database, encrypted with ``GPUAAS_ENCRYPTION_KEYS``) or ``vault``
(HashiCorp Vault or OpenBao, KV v2). ``manage.py migrate_secrets`` moves every
secret from one to the other.

Writes go to the store before the record that names them commits; deletions wait
for the commit (``discard``), so a rolled-back deletion never loses a value that a
record still names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete

from apps.core.secrets.base import (
    MAX_VALUE,
    SecretNotFound,
    SecretStore,
    SecretStoreUnavailable,
)
from apps.core.secrets.local import LocalStore

__all__ = [
    "MAX_VALUE",
    "SecretNotFound",
    "SecretStore",
    "SecretStoreUnavailable",
    "backend",
    "discard",
    "move",
    "owned_by",
    "read_named",
    "store",
]
BACKENDS = ("local", "vault")


@cache
def _vault(addr: str, token: str, mount: str, prefix: str, timeout: float) -> SecretStore:
    from apps.core.secrets.vault import VaultStore  # hvac loads only where Vault is used

    return VaultStore(addr, token, mount, prefix, timeout)


def backend(name: str) -> SecretStore:
    if name == "local":
        return LocalStore()
    if name == "vault":
        if not (settings.VAULT_ADDR and settings.VAULT_TOKEN):
            raise SecretStoreUnavailable("GPUAAS_VAULT_ADDR and GPUAAS_VAULT_TOKEN are not set.")
        return _vault(
            settings.VAULT_ADDR,
            settings.VAULT_TOKEN,
            settings.VAULT_MOUNT,
            settings.VAULT_PREFIX,
            settings.VAULT_TIMEOUT_SECONDS,
        )
    raise ValueError(f"no secrets backend {name!r}")


def store() -> SecretStore:
    """The configured backend."""
    return backend(settings.SECRETS_BACKEND)


def read_named(path: str | None) -> str | None:
    """The value at the path a record names; None when no record names one (``path``
    empty) or the store no longer has it: to a reader, a lost secret is an unset one."""
    if not path:
        return None
    try:
        return store().read(path)
    except SecretNotFound:
        return None


def discard(path: str) -> None:
    """Delete the secret once the current transaction commits (at once outside one)."""
    if path:
        transaction.on_commit(lambda: store().delete(path))


def _discard_owned(sender, instance, **kwargs):
    discard(instance.secret_path)


def owned_by(*models) -> None:
    """Records of ``models`` own the secret at their ``secret_path``: deleting one (by
    itself, in bulk or by cascade) deletes its secret once the deletion commits."""
    for model in models:
        post_delete.connect(
            _discard_owned, sender=model, dispatch_uid=f"secrets-owned-by-{model._meta.label}"
        )


@dataclass
class Moved:
    moved: int = 0
    kept: int = 0  # the target already held the path (it is the newer: see ``move``)


def move(source: SecretStore, target: SecretStore) -> Moved:
    """Every secret of ``source`` into ``target``, then out of ``source``.

    Run with the platform already set to ``target``: anything the target holds at a
    path was written there since, so it wins over the source's copy. Each secret is
    written, read back, and only then deleted from the source: a run cut short is
    finished by the next one, and a second run moves nothing.
    """
    done = Moved()
    for path in source.paths():
        try:
            value = source.read(path)
        except SecretNotFound:
            continue
        try:
            target.read(path)
            done.kept += 1
        except SecretNotFound:
            target.write(path, value)
            if target.read(path) != value:
                raise SecretStoreUnavailable(f"{target.name} did not keep the secret at {path}") from None
            done.moved += 1
        source.delete(path)
    return done
