"""The embedded default's local node agent: a child process of ``serve`` (so an
agent crash never takes the web server down) serving one demo node."""

from __future__ import annotations

import logging
import subprocess
import sys

from django.conf import settings

from apps.allocations.models import Node

logger = logging.getLogger(__name__)


# The local agent serves the first h100-1x node by hostname: allocation hands out
# free nodes in hostname order, so the demo's first one-GPU allocation lands on it
# and apps launched there really run (as local processes). Other demo nodes have
# no agent; apps launched on them stay "requested".
LOCAL_AGENT_FLAVOR = "h100-1x"


def local_agent_node():
    return Node.objects.filter(flavor__name=LOCAL_AGENT_FLAVOR).order_by("hostname").first()


def start(host: str, port: int) -> subprocess.Popen | None:
    node = local_agent_node()
    if node is None:
        logger.warning("no %s node for the local agent; run `manage.py bootstrap_demo`", LOCAL_AGENT_FLAVOR)
        return None
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"  # serve binds loopback only
    command = [
        sys.executable,
        str(settings.BASE_DIR / "manage.py"),
        "run_node_agent",
        "--node",
        node.hostname,
        "--url",
        url,
        "--executor",
        "process",
        # Users log in to the local node through an sshd of the agent's own (decision 0045).
        "--ssh",
        "own",
        # The embedded default has no runtime user of its own: the terminal's shell
        # is the local agent's user, as its SSH server is (issue 17).
        "--terminal-user",
        "agent",
    ]
    logger.info("local node agent for %s started", node.hostname)
    # Its own session: Ctrl-C in serve's terminal reaches serve alone, which stops the
    # agent itself (``stop``) and can then say that everything has stopped.
    return subprocess.Popen(command, start_new_session=True)


def stop(agent: subprocess.Popen | None, timeout: float = 15) -> None:
    """SIGTERM lets it finish a task in progress and stop its SSH server; its workloads
    keep running and the next ``serve`` adopts them again. Past ``timeout`` it is killed."""
    if agent is None or agent.poll() is not None:
        return
    agent.terminate()
    try:
        agent.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("the local node agent did not stop within %ss: killed", timeout)
        agent.kill()
        agent.wait()
