"""``benchmarks/api_auth.py --quick`` as a smoke test: it sets up its database, serves
the app in production mode, drives it, and exits non-zero on any failed request or
when the list endpoint's query count grows with the page size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_runs_clean():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUAAS_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
    }
    result = subprocess.run(
        [
            sys.executable,
            "benchmarks/api_auth.py",
            "--quick",
            "--duration",
            "0.5",
            "--warmup",
            "0",
            "--db-name",
            f"gpuaas_bench_smoke_{worker}_{os.getpid()}",
            "--redis-url",
            "redis://127.0.0.1:6379/0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "query count independent of page size: yes" in result.stdout
    assert "| projects, CCP tenant admin (10 of 10)" in result.stdout
