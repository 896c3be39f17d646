"""``benchmarks/load.py --quick`` as a smoke test: it seeds a small platform in bulk,
starts prod-local's topology (two web processes behind nginx's data plane, a worker
and beat under supervisord), drives portal users, CCP clients and app visitors at
once with locust, and exits non-zero on any failed request."""

from __future__ import annotations

import re

import pytest

from tests.ops.bench import run_quick_benchmark

pytestmark = [pytest.mark.heavy, pytest.mark.production]


def test_quick_load_runs_clean(redis_server):
    stdout = run_quick_benchmark(
        "load.py",
        *("--redis-url", redis_server.url, "--drop"),
        db_prefix="gpuaas_load_smoke",
        # prod-local collects and compresses the static files before it serves: minutes on a busy machine.
        timeout=1200,
    )
    # Each class of the mix was served (which pages a few seconds reach is chance).
    for kind in ("page", "api", "proxy"):
        assert re.search(rf"^\| {kind} +\| +[1-9]", stdout, re.MULTILINE), stdout
    assert "goal: p95 < 300 ms for pages and API, zero errors:" in stdout
    assert "project list, platform-wide portal: 200" in stdout
