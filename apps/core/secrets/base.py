"""What every secrets-store backend does, and the names it keeps secrets under."""

from __future__ import annotations

import re
from typing import Protocol

from apps.core.errors import Conflict, Unavailable

# Paths are the platform's own (``runtime/instances/<uuid>/token``), never a user's text:
# a user's secret is stored under its record's id, so names need no escaping anywhere.
_PATH = re.compile(r"[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)*")
MAX_PATH = 200
# A secret is a token, a key or a password, never a document.
MAX_VALUE = 64 * 1024


class SecretNotFound(Conflict, LookupError):
    """No secret at that path. Reaching a caller, it means a record names a secret the
    configured store lacks (the backend was switched without ``migrate_secrets``):
    answered as a conflict that says so, never a 500."""

    default_message = (
        "A secret this needs is not in the secrets store; an operator should check "
        "GPUAAS_SECRETS_BACKEND and run migrate_secrets."
    )

    def __init__(self, path: str):
        super().__init__()
        self.path = path


class SecretStoreUnavailable(Unavailable):
    default_message = "The secrets store cannot be reached; try again shortly."


def check_path(path: str) -> str:
    if len(path) > MAX_PATH or not _PATH.fullmatch(path):
        raise ValueError(f"not a secrets-store path: {path!r}")
    return path


class SecretStore(Protocol):
    """A secret is a text value at a path. Writes replace; deletes are idempotent."""

    name: str

    def read(self, path: str) -> str:
        """The value, or ``SecretNotFound``."""

    def write(self, path: str, value: str) -> None:
        """Create or replace (a write of the value already there changes nothing)."""

    def delete(self, path: str) -> None:
        """Remove every version; nothing happens when there is none."""

    def paths(self) -> list[str]:
        """Every path the store holds for this platform."""
