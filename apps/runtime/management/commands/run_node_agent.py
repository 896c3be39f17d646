"""``run_node_agent --node NODE [--url URL] [--state-dir DIR] [--executor auto|process|docker]
[--ssh off|own|system]``.

Runs the same agent as ``python -m node_agent`` for one node. Having the
database at hand, it enrolls itself: when it has no saved credential the
platform accepts, it mints the node's one-time bootstrap token, so the embedded
default's local agent and demos need no operator step. It does so again when the
platform revokes the credential (at each release of the node's allocation), so the
node has an agent for its next allocation, as cloud-init gives a real node one.
"""

import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from apps.allocations import nodes
from apps.allocations.models import Node
from apps.core.errors import Unauthenticated
from node_agent import access, credentials, executors, runner
from node_agent.terminal import TERMINAL_USERS


class Command(BaseCommand):
    help = "Run a node agent for NODE (enrolling it when it has no valid credential)."

    def add_arguments(self, parser):
        parser.add_argument("--node", required=True, help="the node's hostname")
        parser.add_argument("--url", default=settings.ISSUER, help="the platform's base URL")
        parser.add_argument("--state-dir", type=Path, help="default: var/agent/NODE")
        parser.add_argument("--executor", choices=executors.KINDS, default="auto")
        parser.add_argument("--heartbeat-seconds", type=float, default=runner.HEARTBEAT_SECONDS)
        # Any free port: several local agents may share this machine; the platform learns it.
        parser.add_argument(
            "--metrics-port", type=int, default=0, help="DCGM-form metrics port (0: any free)"
        )
        parser.add_argument(
            "--ssh", choices=access.KINDS, default="off", help="own: run an sshd of its own on loopback"
        )
        parser.add_argument("--terminal-user", choices=TERMINAL_USERS, default="runtime")

    def handle(
        self,
        *args,
        node,
        url,
        state_dir,
        executor,
        heartbeat_seconds,
        metrics_port,
        ssh,
        terminal_user,
        **options,
    ):
        found = Node.objects.filter(hostname=node).first()
        if found is None:
            raise CommandError(f"No node {node!r}.")
        state_dir = state_dir or settings.VAR_DIR / "agent" / node
        replaced = 0
        while True:
            token = None
            if not _accepted(state_dir, found):
                credentials.forget(state_dir)
                token = nodes.issue_bootstrap_token(found)
            connections.close_all()  # from here on the agent speaks only HTTP, like on a real node
            code = runner.run_agent(
                url=url,
                node=node,
                state_dir=state_dir,
                executor=executor,
                bootstrap_token=token,
                heartbeat_seconds=heartbeat_seconds,
                metrics_port=metrics_port,
                ssh=ssh,
                terminal_user=terminal_user,
            )
            if (
                code == runner.EXIT_UNAUTHORIZED
                and token
                and credentials.load(state_dir) is None
                and replaced < 5
            ):
                # Refused before the token was spent: an allocation's cloud-init issued the
                # node a new one meanwhile (a newcomer allocating right after ``serve``).
                replaced += 1
                time.sleep(1)
                continue
            if code != runner.EXIT_UNAUTHORIZED or not _revoked(state_dir, found):
                break
        if code:
            sys.exit(code)


def _accepted(state_dir: Path, node: Node) -> bool:
    """Whether the saved credential is this node's current one (a fresh database has
    forgotten it), with the address it enrolled from (enrolled before addresses were
    recorded, every app it reports would be refused)."""
    saved = credentials.load(state_dir)
    if saved is None:
        return False
    try:
        current = nodes.authenticate_agent(saved)
    except Unauthenticated:
        return False
    return current.pk == node.pk and current.agent_address is not None


def _revoked(state_dir: Path, node: Node) -> bool:
    """Whether the agent stopped because the platform revoked the credential it had
    (the node was released): not because enrolling failed (no credential was saved),
    nor because another agent enrolled for the node since (the node has a credential
    again). Enrolling again after those would loop, or take turns with that agent."""
    return (
        credentials.load(state_dir) is not None
        and Node.objects.filter(pk=node.pk, credential_hash="").exists()
    )
