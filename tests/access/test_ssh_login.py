"""A user logs in to their allocation's node with real OpenSSH: the key they add
through the API reaches the node's runtime user within seconds, the host is checked
against the fingerprints the platform reports, and a removed key stops working."""

from __future__ import annotations

import subprocess

import pytest

from apps.access.models import AuthorizedKey
from apps.core.models import AuditEvent
from tests.support.agent import running_agent
from tests.support.members import service_account_client
from tests.support.ssh import (
    KeyPair,
    access_urls,
    key_pair,
    ssh,
    wait_applied,
    wait_removed,
    wait_reported,
)

# Real agents call a live server: SQLite locks its tables under them (the embedded
# default's ssh login is in tests/ops/test_make_run_path.py instead).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.production]


@pytest.fixture
def ssh_agent(portal, active_allocation, tmp_path):
    """The allocation's node with a real agent running an sshd of its own (the embedded default's)."""
    with running_agent(portal.url, active_allocation.node, tmp_path, ssh="own") as agent:
        yield agent


def test_a_key_added_through_the_api_logs_in_and_a_removed_one_is_refused(
    api, allocator, project, active_allocation, ssh_agent, tmp_path
):
    api.force_login(allocator)
    access_url, keys_url = access_urls(project, active_allocation)
    access = wait_reported(api, access_url, active_allocation)
    # What the platform reports is what the node's sshd presents (ssh-keygen reads its key files).
    on_disk = sorted(
        subprocess.run(
            ["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        for path in (ssh_agent.state_dir / "ssh").glob("ssh_host_*_key.pub")
    )
    assert sorted(access["host_key_fingerprints"]) == on_disk
    assert access["host"] == "127.0.0.1"
    assert access["ssh_command"] == f"ssh -p {access['port']} {access['user']}@127.0.0.1"

    key = key_pair(tmp_path, "alice")
    known_hosts = tmp_path / "known_hosts"
    before = ssh(access, key, "true", known_hosts)
    assert before.returncode == 255
    assert "Permission denied" in before.stderr

    added = api.post(keys_url, {"public_key": key.public_key, "purpose": "user"}, format="json")
    assert added.status_code == 201, added.content
    body = added.json()
    assert body["state"] == "pending"
    assert body["owner"] == allocator.username
    assert body["purpose"] == "user"
    assert body["fingerprint"].startswith("SHA256:")
    wait_applied(api, keys_url, body["id"])

    login = ssh(access, key, "echo logged in as $(id -un) on $(hostname)", known_hosts)
    assert login.returncode == 0, login.stderr
    assert f"logged in as {access['user']}" in login.stdout

    assert api.delete(f"{keys_url}/{body['id']}").status_code == 204
    # Once the node reported the key out of its block (an ssh attempt every 0.2 s until
    # then cost the node's sshd a key exchange each).
    wait_removed(api, keys_url, body["id"])
    assert ssh(access, key, "true", known_hosts).returncode == 255
    actions = set(AuditEvent.objects.filter(target_id=body["id"]).values_list("action", flat=True))
    assert actions == {"authorized_key.add", "authorized_key.remove"}


def test_a_host_key_other_than_the_reported_one_is_refused(
    api, allocator, project, active_allocation, ssh_agent, tmp_path
):
    """The known_hosts the user builds from the answer really pins the host: a wrong key fails."""
    api.force_login(allocator)
    access_url, keys_url = access_urls(project, active_allocation)
    access = wait_reported(api, access_url, active_allocation)
    key = key_pair(tmp_path, "alice")
    added = api.post(keys_url, {"public_key": key.public_key}, format="json").json()
    wait_applied(api, keys_url, added["id"])
    impostor = key_pair(tmp_path, "impostor").public_key.rsplit(" ", 1)[0]
    forged = {**access, "known_hosts": [f"[127.0.0.1]:{access['port']} {impostor}"]}

    refused = ssh(forged, key, "true", tmp_path / "known_hosts")

    assert refused.returncode == 255
    assert "Host key verification failed" in refused.stderr


def test_keys_an_operator_put_outside_the_managed_block_are_left_alone(
    api, allocator, project, active_allocation, ssh_agent, tmp_path
):
    api.force_login(allocator)
    access_url, keys_url = access_urls(project, active_allocation)
    access = wait_reported(api, access_url, active_allocation)
    operator = key_pair(tmp_path, "operator")
    authorized_keys = ssh_agent.state_dir / "ssh" / "authorized_keys"
    authorized_keys.write_text(f"# the operator's own\n{operator.public_key}\n")
    user_key = key_pair(tmp_path, "alice")
    added = api.post(keys_url, {"public_key": user_key.public_key}, format="json").json()
    wait_applied(api, keys_url, added["id"])
    api.delete(f"{keys_url}/{added['id']}")
    wait_removed(api, keys_url, added["id"])

    assert authorized_keys.read_text() == f"# the operator's own\n{operator.public_key}\n"
    assert ssh(access, operator, "true", tmp_path / "known_hosts").returncode == 0
    assert not AuthorizedKey.objects.exists()


def test_an_app_controller_logs_in_with_a_delivered_access_credential(
    api, allocator, project, active_allocation, ssh_agent, tmp_path
):
    """Seed 000 section 6: the project's credential is delivered to its app controller,
    which puts the public half on the allocation as its bootstrap key and logs in with
    the private half."""
    api.force_login(allocator)
    credentials = f"/api/v1/projects/{project.pk}/access-credentials"
    created = api.post(credentials, {"name": "controller"}, format="json")
    assert created.status_code == 201, created.content
    controller, controller_name = service_account_client(project, "slurm-controller")
    delivered = controller.post(
        f"{credentials}/{created.json()['id']}/deliver",
        {"purpose": "bootstrap the allocated node"},
        format="json",
    )
    assert delivered.status_code == 200, delivered.content
    access_url, keys_url = access_urls(project, active_allocation)
    access = wait_reported(controller, access_url, active_allocation)
    added = controller.post(
        keys_url, {"public_key": delivered.json()["public_key"], "purpose": "bootstrap"}, format="json"
    )
    assert added.status_code == 201, added.content
    assert (added.json()["owner"], added.json()["purpose"]) == (controller_name, "bootstrap")
    wait_applied(controller, keys_url, added.json()["id"])
    private = tmp_path / "delivered"
    private.write_text(delivered.json()["private_key"])
    private.chmod(0o600)

    login = ssh(
        access, KeyPair(private, delivered.json()["public_key"]), "echo bootstrapped", tmp_path / "kh"
    )

    assert login.returncode == 0, login.stderr
    assert login.stdout == "bootstrapped\n"
