"""Executors run one instance's workload on this node: ``process`` (local
processes, the embedded default) or ``docker`` (a container engine)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from node_agent.executors.base import Executor
from node_agent.executors.docker import DockerExecutor
from node_agent.executors.process import ProcessExecutor

KINDS = ("auto", "process", "docker")


def create(kind: str, state_dir: Path) -> Executor:
    """``auto``: the container engine when one answers, local processes otherwise."""
    if kind == "auto":
        kind = "docker" if engine_answers() else "process"
    if kind == "docker":
        return DockerExecutor(state_dir / "docker")
    return ProcessExecutor(state_dir)


def engine_answers(docker: str = "docker") -> bool:
    if shutil.which(docker) is None:
        return False
    try:
        return (
            subprocess.run(
                [docker, "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                timeout=15,
                check=False,
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        return False
