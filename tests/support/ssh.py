"""The OpenSSH client as a user runs it: a key pair of their own, a known_hosts file
built from what the platform says about the host (no trust on first use), BatchMode;
and, through the API, the allocation's access answer and its keys reaching the node."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

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


def wait_reported(api, access_url) -> dict:
    """The access answer, once the node's sshd has reported its host."""

    def reported():
        body = api.get(access_url).json()
        return body if body["host"] else None

    return wait_for(reported, timeout=30, what="the node's sshd reported")


def key_state(api, keys_url, key_id) -> str | None:
    rows = {row["id"]: row["state"] for row in api.get(keys_url).json()["results"]}
    return rows.get(key_id)


def wait_applied(api, keys_url, key_id) -> None:
    wait_for(lambda: key_state(api, keys_url, key_id) == "applied", timeout=APPLY_SECONDS, what="key applied")
