"""A real node agent process against the portal served in this test process, and an
agent's enrollment as the agent API sees it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from apps.allocations import nodes
from node_agent import access
from node_agent.executors.process import ProcessExecutor
from tests.support.processes import ROOT


class AgentProcess:
    """``python -m node_agent`` for one node, its output kept in a file. Like
    on a node, the bootstrap token stays in its environment across restarts."""

    def __init__(
        self, url: str, hostname: str, bootstrap_token: str, state_dir: Path, log: Path, ssh: str = "off"
    ):
        self.url, self.hostname, self.state_dir, self.log_path = url, hostname, state_dir, log
        self.ssh = ssh
        self.env = {**os.environ, "GPUAAS_BOOTSTRAP_TOKEN": bootstrap_token}  # never on the command line
        self.process: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "node_agent",
                    "--url",
                    self.url,
                    "--node",
                    self.hostname,
                    "--state-dir",
                    str(self.state_dir),
                    "--executor",
                    "process",
                    "--heartbeat-seconds",
                    "1",
                    "--metrics-port",
                    "0",
                    "--ssh",
                    self.ssh,
                    # Terminals open a shell as this test's user, as on the embedded default.
                    "--terminal-user",
                    "agent",
                ],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text()


@contextlib.contextmanager
def running_agent(url: str, node, tmp_path: Path, *, ssh: str = "off") -> Iterator[AgentProcess]:
    """An agent for ``node`` that reaches the portal at ``url``, started with a fresh
    bootstrap token (``ssh="own"``: with an sshd of its own); afterwards the agent and
    every workload it left are gone."""
    agent = AgentProcess(
        url,
        node.hostname,
        nodes.issue_bootstrap_token(node),
        tmp_path / "agent",
        tmp_path / "agent.log",
        ssh=ssh,
    ).start()
    try:
        yield agent
    finally:
        if agent.process.poll() is None:
            agent.kill()
        if ssh == "own":  # a killed agent leaves its sshd behind, as on a node
            access.OwnSshd(agent.state_dir).stop_left_over()
        leftovers = ProcessExecutor(agent.state_dir, stop_grace=2)
        for instance_id in leftovers.running():
            leftovers.remove({"instance_id": instance_id})


def enroll(api, node, address: str) -> str:
    """The node's agent spends a bootstrap token, as cloud-init's does, from ``address``."""
    token = nodes.issue_bootstrap_token(node)
    response = api.post(
        "/api/agent/v1/enroll",
        {"hostname": node.hostname, "bootstrap_token": token},
        format="json",
        REMOTE_ADDR=address,
    )
    assert response.status_code == 201, response.content
    return response.json()["credential"]
