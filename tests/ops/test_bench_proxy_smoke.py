"""``benchmarks/proxy.py --quick`` as a smoke test: it sets up its database, launches
two instances behind proxy routes, serves the portal in production mode, drives
every target (direct, the ASGI proxy, the nginx data plane, plain nginx and
configurable-http-proxy) with wrk and WebSocket echoes, holds WebSockets through
each proxy, and exits non-zero on any failed request, wrong echo or lost
WebSocket. Its performance goals are printed, never asserted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHP = ROOT / "benchmarks/peers/node_modules/.bin/configurable-http-proxy"


def test_quick_proxy_benchmark_runs_clean():
    missing = [tool for tool in ("nginx", "wrk") if shutil.which(tool) is None]
    if not CHP.exists():
        missing.append("configurable-http-proxy (cd benchmarks/peers && npm ci)")
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUAAS_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
    }
    result = subprocess.run(
        [
            sys.executable,
            "benchmarks/proxy.py",
            "--quick",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--websockets",
            "50",
            "--hold",
            "2",
            "--db-name",
            f"gpuaas_bench_proxy_smoke_{worker}_{os.getpid()}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for goal in ("nginx data plane >=", "ASGI proxy req/s per core >=", "ASGI proxy memory flat"):
        assert f"goal: {goal}" in result.stdout
    assert "| ASGI proxy (uvicorn" in result.stdout
