"""What every executor offers the runner, and how a task fails."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

# The file an instance's output goes to, in a directory of its own (the log shipper
# keeps its offset beside it).
OUTPUT = "output.log"


class TaskFailed(Exception):
    """The task cannot be done; the message becomes the instance's failure reason,
    so it says what went wrong in words an app user can act on (and holds no secret)."""


class Executor(Protocol):
    name: str

    def start(
        self, spec: dict, secrets: dict[str, str], address: str, proxies: Sequence[str] = ()
    ) -> list[dict]:
        """Run the workload, publishing its endpoints on ``address`` (the node's
        address as the platform sees it) to ``proxies`` only (``firewall``); returns
        them as ``{"name", "host", "port"}``."""

    def stop(self, spec: dict) -> None:
        """Stop the workload, keeping what it wrote, and close its ports; nothing to stop is fine."""

    def remove(self, spec: dict) -> None:
        """Stop it and delete everything it left on the node; nothing there is fine."""

    def running(self) -> list[str]:
        """Ids of the instances whose workload is alive right now."""

    def outputs(self) -> dict[str, Path]:
        """The file each instance's output (stdout and stderr) goes to, by instance id,
        for the instances whose output this executor keeps on the node."""
