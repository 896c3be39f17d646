"""Host ports for a workload's endpoints."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(names: list[str], host: str = "127.0.0.1") -> dict[str, int]:
    """One free port on ``host`` per endpoint name. The sockets stay bound until
    every port is picked, so two endpoints never get the same one."""
    with ExitStack() as stack:
        ports = {}
        for name in names:
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))
            ports[name] = sock.getsockname()[1]
        return ports
