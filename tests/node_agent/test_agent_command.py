"""``manage.py run_node_agent``: it enrolls the node by itself when it has no
credential the platform accepts, and reuses a saved one across restarts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection
from django.utils import timezone

from apps.allocations import services as allocations
from apps.allocations.models import Allocation, Node
from apps.tenancy import principal as principals
from tests.support.processes import ROOT, wait_for

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]


class Command:
    """The command as a process, and the node it serves."""

    def __init__(self, portal, node, state_dir):
        db = connection.settings_dict  # the test database, which the command mints the token in
        env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        }
        self.node, self.started = node, timezone.now()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "run_node_agent",
                "--node",
                node.hostname,
                "--url",
                portal.url,
                "--state-dir",
                str(state_dir),
                "--executor",
                "process",
                # A revoked credential shows on the next heartbeat: within a second.
                "--heartbeat-seconds",
                "1",
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def serving(self) -> str:
        """The node's credential hash once the agent's loop runs: a heartbeat after
        it started and after it enrolled (enrolling stamps one too)."""

        def heartbeat():
            node = Node.objects.get(pk=self.node.pk)
            beat = node.credential_hash and node.last_heartbeat_at > max(self.started, node.enrolled_at)
            return node.credential_hash if beat else None

        return wait_for(heartbeat, what="a heartbeat from the agent's loop")

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=30)


def serve_once(portal, node, state_dir) -> str:
    command = Command(portal, node, state_dir)
    try:
        return command.serving()
    finally:
        assert command.stop() == 0


def test_the_command_enrolls_once_and_again_when_the_platform_forgot(portal, nodes, tmp_path):
    node = nodes[0]
    first = serve_once(portal, node, tmp_path)
    assert (tmp_path / "credential").stat().st_mode & 0o777 == 0o600

    assert serve_once(portal, node, tmp_path) == first  # the saved credential: no new enrollment

    Node.objects.filter(pk=node.pk).update(credential_hash="")  # a fresh database forgot it
    assert serve_once(portal, node, tmp_path) != first


def test_the_command_enrolls_again_when_a_release_revoked_its_credential(
    portal, allocator, active_allocation, tmp_path, django_capture_on_commit_callbacks
):
    """The embedded default's local agent outlives its node's allocations: each release
    revokes the credential, and the command enrolls the node again for the next one."""
    command = Command(portal, active_allocation.node, tmp_path)
    try:
        first = command.serving()
        with django_capture_on_commit_callbacks(execute=True):
            allocations.release(principals.for_user(allocator), active_allocation)
        assert Allocation.objects.get(pk=active_allocation.pk).state == Allocation.State.RELEASED
        assert command.serving() != first
        assert Node.objects.get(pk=active_allocation.node_id).agent_address == "127.0.0.1"
    finally:
        assert command.stop() == 0
