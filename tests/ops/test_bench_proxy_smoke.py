"""``benchmarks/proxy.py --quick`` as a smoke test: it sets up its database, launches
two instances behind proxy routes, serves the portal in production mode, drives
every target (direct, the ASGI proxy, the nginx data plane, plain nginx and
configurable-http-proxy) with wrk and WebSocket echoes, holds WebSockets through
each proxy, and exits non-zero on any failed request, wrong echo or lost
WebSocket. Its performance goals are printed, never asserted."""

from __future__ import annotations

import shutil

import pytest

from tests.ops.bench import ROOT, run_quick_benchmark

pytestmark = pytest.mark.heavy

CHP = ROOT / "benchmarks/peers/node_modules/.bin/configurable-http-proxy"


def test_quick_proxy_benchmark_runs_clean():
    missing = [tool for tool in ("nginx", "wrk") if shutil.which(tool) is None]
    if not CHP.exists():
        missing.append("configurable-http-proxy (cd benchmarks/peers && npm ci)")
    # `make test` installs them (its nginx and bench-tools targets): missing is a failure.
    assert not missing, f"not installed: {', '.join(missing)}"
    stdout = run_quick_benchmark(
        "proxy.py",
        *("--duration", "1", "--warmup", "0", "--websockets", "50", "--hold", "2"),
        db_prefix="gpuaas_bench_proxy_smoke",
    )
    for goal in (
        "nginx data plane >=",
        "nginx data plane adds <=",
        "ASGI proxy req/s per core >=",
        "ASGI proxy memory flat",
    ):
        assert f"goal: {goal}" in stdout
    assert "| ASGI proxy (uvicorn" in stdout
    assert "nginx data plane / plain proxy_pass, 2 alternating rounds" in stdout
