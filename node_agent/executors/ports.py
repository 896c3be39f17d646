"""Host ports for a workload's endpoints."""

from __future__ import annotations

import ipaddress
import socket
from contextlib import ExitStack

from node_agent.executors.base import TaskFailed


def free_ports(names: list[str], host: str) -> dict[str, int]:
    """One free port on ``host`` per endpoint name. The sockets stay bound until
    every port is picked, so two endpoints never get the same one."""
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    with ExitStack() as stack:
        ports = {}
        for name in names:
            sock = stack.enter_context(socket.socket(family))
            try:
                sock.bind((host, 0))
            except OSError as exc:
                raise TaskFailed(
                    f"this node cannot publish apps on {host}, the address the platform sees its "
                    f"agent at ({exc.strerror}); the agent must reach the platform without "
                    "address translation"
                ) from None
            ports[name] = sock.getsockname()[1]
        return ports


def url_host(address: str) -> str:
    """``address`` as the host part of a URL or of Docker's ``--publish`` (IPv6 in brackets)."""
    return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
