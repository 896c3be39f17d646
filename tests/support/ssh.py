"""The OpenSSH client as a user runs it: a key pair of their own, a known_hosts file
built from what the platform says about the host (no trust on first use), BatchMode;
and, through the API, the allocation's access answer and its keys reaching the node."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from apps.access import services
from apps.access.models import AuthorizedKey
from apps.allocations.models import Allocation
from tests.support.processes import wait_for

# The contract: the node applies an added or removed key within 10 s.
APPLY_SECONDS = 10


@dataclass
class KeyPair:
    private_path: Path
    public_key: str  # "ssh-ed25519 AAAA... comment"


def key_pair(directory: Path, name: str) -> KeyPair:
    private = ed25519.Ed25519PrivateKey.generate()
    path = directory / name
    path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return KeyPair(path, f"{public.decode()} {name}@laptop")


def ssh(access: dict, key: KeyPair, command: str, known_hosts: Path) -> subprocess.CompletedProcess:
    """``ssh`` to the host the access answer names, checking its host key against
    ``known_hosts`` (written from the answer's host keys)."""
    known_hosts.write_text("".join(f"{line}\n" for line in access["known_hosts"]))
    return subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(key.private_path),
            "-p",
            str(access["port"]),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "ConnectTimeout=5",
            f"{access['user']}@{access['host']}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def access_urls(project, allocation) -> tuple[str, str]:
    base = f"/api/v1/projects/{project.pk}/allocations/{allocation.pk}"
    return f"{base}/access", f"{base}/authorized-keys"


# The waits below poll the database and then read the API once: an API call every 0.2 s
# was most of the SSH tests' CPU in the test process (10-15 ms each, 2026-11-29).


def wait_reported(api, access_url, allocation) -> dict:
    """The access answer, once the node's sshd has reported its host."""
    wait_for(
        lambda: services.ssh_host(Allocation.objects.select_related("node").get(pk=allocation.pk)),
        timeout=30,
        what="the node's sshd reported",
    )
    body = api.get(access_url).json()
    assert body["host"], body
    return body


def key_state(api, keys_url, key_id) -> str | None:
    rows = {row["id"]: row["state"] for row in api.get(keys_url).json()["results"]}
    return rows.get(key_id)


def wait_applied(api, keys_url, key_id) -> None:
    applied = AuthorizedKey.objects.filter(pk=key_id, state=AuthorizedKey.State.APPLIED)
    wait_for(applied.exists, timeout=APPLY_SECONDS, what="key applied")
    assert key_state(api, keys_url, key_id) == "applied"


def wait_removed(api, keys_url, key_id) -> None:
    """Until the node reported the key out of its block (the record goes then)."""
    record = AuthorizedKey.objects.filter(pk=key_id)
    wait_for(lambda: not record.exists(), timeout=APPLY_SECONDS, what="key removed")
    assert key_state(api, keys_url, key_id) is None
