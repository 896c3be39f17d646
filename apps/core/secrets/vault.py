"""The ``vault`` backend: HashiCorp Vault or OpenBao, KV v2 through hvac.

Each secret is ``{"value": ...}`` at ``GPUAAS_VAULT_PREFIX`` + path on the
``GPUAAS_VAULT_MOUNT`` mount. Writes are check-and-set against the version read
just before, so two writers never overwrite each other unseen: the loser reads
again and writes over the newer version (or finds its value already there)."""

from __future__ import annotations

import contextlib
import logging

import hvac
import requests
from hvac import exceptions

from apps.core.secrets.base import MAX_VALUE, SecretNotFound, SecretStoreUnavailable, check_path

logger = logging.getLogger("gpuaas.secrets")
_CAS_ATTEMPTS = 5
# What the server or the network can answer that is no fault of the caller's request.
_UNREACHABLE = (
    requests.RequestException,
    exceptions.VaultDown,
    exceptions.Forbidden,
    exceptions.Unauthorized,
    exceptions.InternalServerError,
    exceptions.BadGateway,
    exceptions.RateLimitExceeded,
    exceptions.VaultNotInitialized,
)


class VaultStore:
    name = "vault"

    def __init__(self, addr: str, token: str, mount: str, prefix: str, timeout: float):
        self.mount, self.prefix = mount, prefix
        self.client = hvac.Client(url=addr, token=token, timeout=timeout)
        self.kv = self.client.secrets.kv.v2

    def _call(self, what: str, function, *args, **kwargs):
        try:
            return function(*args, **kwargs, mount_point=self.mount)
        except _UNREACHABLE as exc:
            # The exception's text is the server's error list, never a secret; the path is ours.
            logger.warning("secrets store: %s failed: %s", what, exc.__class__.__name__)
            raise SecretStoreUnavailable() from exc

    def _current(self, full: str) -> tuple[int, str | None]:
        """(latest version, its value): (0, None) when there is no secret."""
        try:
            answer = self._call("read", self.kv.read_secret_version, full, raise_on_deleted_version=False)
        except exceptions.InvalidPath:
            return 0, None
        data = answer["data"]
        value = (data.get("data") or {}).get("value")  # None: the latest version was deleted
        return data["metadata"]["version"], value

    def read(self, path: str) -> str:
        _, value = self._current(self.prefix + check_path(path))
        if value is None:
            raise SecretNotFound(path)
        return value

    def write(self, path: str, value: str) -> None:
        if len(value) > MAX_VALUE:
            raise ValueError("a secret holds at most 64 KiB")
        full = self.prefix + check_path(path)
        for _ in range(_CAS_ATTEMPTS):
            version, current = self._current(full)
            if current == value:
                return
            try:
                self._call("write", self.kv.create_or_update_secret, full, {"value": value}, cas=version)
                return
            except exceptions.InvalidRequest as exc:
                if "check-and-set" not in str(exc):
                    raise
                # Another writer got in between our read and our write: read again.
        raise SecretStoreUnavailable(f"The secret at {path} kept changing while it was written; try again.")

    def delete(self, path: str) -> None:
        with contextlib.suppress(exceptions.InvalidPath):
            self._call("delete", self.kv.delete_metadata_and_all_versions, self.prefix + check_path(path))

    def paths(self) -> list[str]:
        found, folders = [], [""]
        while folders:
            folder = folders.pop()
            try:
                answer = self._call("list", self.kv.list_secrets, self.prefix + folder)
            except exceptions.InvalidPath:
                continue  # an empty folder
            for key in answer["data"]["keys"]:
                (folders if key.endswith("/") else found).append(folder + key)
        return sorted(found)
