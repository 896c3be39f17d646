"""The node agent's side of SSH access on a real node: as root it creates the runtime
user with useradd and keeps the platform's keys in one marked block of the user's
authorized_keys, leaving the rest of the file alone, and empties the block when the
platform no longer wants a user (the node's release)."""

from __future__ import annotations

import os
import pwd
import subprocess
import uuid
from pathlib import Path

import pytest

from node_agent import access
from tests.support.world import MATRIX_KEYS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="useradd needs root, as the agent on a node has")


@pytest.fixture
def runtime_user():
    name = f"gpuaas-t{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def test_the_agent_creates_the_runtime_user_and_keeps_its_keys_in_the_block(runtime_user, tmp_path):
    host = access.SystemHost(tmp_path, ssh_dir=tmp_path)
    keys = [{"id": "k1", "public_key": MATRIX_KEYS[0]}, {"id": "k2", "public_key": MATRIX_KEYS[1]}]

    user, applied = host.apply(runtime_user, keys)

    entry = pwd.getpwnam(runtime_user)
    authorized_keys = Path(entry.pw_dir) / ".ssh" / "authorized_keys"
    assert (user, applied) == (runtime_user, ["k1", "k2"])
    stat = authorized_keys.stat()
    assert (stat.st_uid, stat.st_mode & 0o777) == (entry.pw_uid, 0o600)
    assert (authorized_keys.parent.stat().st_mode & 0o777) == 0o700

    operator_line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB ops"
    authorized_keys.write_text(f"{operator_line}\n{authorized_keys.read_text()}")
    assert host.apply(runtime_user, keys[1:]) == (runtime_user, ["k2"])
    assert host.apply(None, []) == (runtime_user, [])  # released: the block goes, the user stays
    assert authorized_keys.read_text() == f"{operator_line}\n"


def test_a_user_name_useradd_should_not_see_is_refused(tmp_path):
    with pytest.raises(access.AccessError):
        access.SystemHost(tmp_path).apply("root;rm -rf /", [])


def test_a_malformed_key_line_never_reaches_the_file(tmp_path):
    with pytest.raises(access.AccessError):
        access.render("", [{"id": "k1", "public_key": 'ssh-ed25519 AAAA\ncommand="x" ssh-rsa AAAA'}])
