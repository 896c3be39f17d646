"""``benchmarks/allocations.py --quick`` as a smoke test: it sets up its database,
serves the app in production mode with Celery worker processes (prefork) and a
private Redis, runs a small allocation storm and the status lookups, and exits
non-zero on any failed request, an allocation that did not become ACTIVE, or a
node in two allocations. Its performance goals are printed, never asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_allocations_benchmark_runs_clean():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUAAS_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
    }
    result = subprocess.run(
        [
            sys.executable,
            "benchmarks/allocations.py",
            "--quick",
            "--allocations",
            "24",
            "--single-runs",
            "1",
            "--status-requests",
            "40",
            "--db-name",
            f"gpuaas_bench_alloc_smoke_{worker}_{os.getpid()}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for check in (
        "every POST answered 202",
        "every allocation ACTIVE",
        "all nodes distinct (database)",
        "no node in two live allocations",
    ):
        assert f"check: {check}: yes" in result.stdout
    assert "goal: storm time <=" in result.stdout
    assert "| tenant admin, sequential" in result.stdout
