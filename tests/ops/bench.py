"""Running a ``benchmarks/*.py --quick`` script as a smoke test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_quick_benchmark(script: str, *args: str, db_prefix: str, timeout: int = 300) -> str:
    """``benchmarks/{script} --quick *args`` on its own database (named from ``db_prefix``,
    the xdist worker and this process), outside the test settings' environment; asserts
    a zero exit and returns what it printed."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUAAS_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
        # The static files the tests' topologies share, collected once (tests/settings.py):
        # a collection of its own would cost the benchmark's topology a minute of CPU.
        or k == "GPUAAS_STATIC_ROOT"
    }
    result = subprocess.run(
        [
            sys.executable,
            f"benchmarks/{script}",
            "--quick",
            *args,
            "--db-name",
            f"{db_prefix}_{worker}_{os.getpid()}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout
