"""``python -m node_agent --url URL --node HOSTNAME [--bootstrap-token T]
[--state-dir DIR] [--executor auto|process|docker] [--ssh off|own|system]
[--terminal-user runtime|agent]``.

The options default to the variables cloud-init writes to ``/etc/gpuaas/agent.env``
(``GPUAAS_URL``, ``GPUAAS_NODE``, ``GPUAAS_BOOTSTRAP_TOKEN``); prefer the variable
for the token, since a command line shows in the process list.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from node_agent import access, executors, runner, terminal


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m node_agent", description="GPUaaS node agent")
    parser.add_argument(
        "--url",
        default=os.environ.get("GPUAAS_URL"),
        required="GPUAAS_URL" not in os.environ,
        help="the platform's base URL",
    )
    parser.add_argument(
        "--node",
        default=os.environ.get("GPUAAS_NODE"),
        required="GPUAAS_NODE" not in os.environ,
        help="this node's hostname on the platform",
    )
    parser.add_argument(
        "--bootstrap-token",
        default=os.environ.get("GPUAAS_BOOTSTRAP_TOKEN"),
        help="one-time enrollment token, used when no credential is saved yet",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("GPUAAS_AGENT_STATE_DIR", "/var/lib/gpuaas-agent")),
    )
    parser.add_argument("--executor", choices=executors.KINDS, default="auto")
    parser.add_argument(
        "--ssh",
        choices=access.KINDS,
        default=os.environ.get("GPUAAS_SSH", "off"),
        help="system: the node's sshd and runtime user (cloud-init sets it); own: an sshd of the "
        "agent's own on loopback, as the agent's user (the embedded default); off: no SSH access",
    )
    parser.add_argument("--heartbeat-seconds", type=float, default=runner.HEARTBEAT_SECONDS)
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("GPUAAS_AGENT_METRICS_PORT", "9400")),
        help="port of the DCGM-form metrics endpoint (the dcgm-exporter's by default; 0: any free one)",
    )
    parser.add_argument(
        "--terminal-user",
        choices=terminal.TERMINAL_USERS,
        default="runtime",
        help="whose shell a web terminal runs: the allocation's runtime user, or this agent's own user",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return runner.run_agent(
        url=options.url,
        node=options.node,
        state_dir=options.state_dir,
        executor=options.executor,
        bootstrap_token=options.bootstrap_token,
        heartbeat_seconds=options.heartbeat_seconds,
        metrics_port=options.metrics_port,
        ssh=options.ssh,
        terminal_user=options.terminal_user,
    )


if __name__ == "__main__":
    sys.exit(main())
