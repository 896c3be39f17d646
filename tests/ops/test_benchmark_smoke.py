"""``benchmarks/api_auth.py --quick`` as a smoke test: it sets up its database, serves
the app in production mode, drives it, and exits non-zero on any failed request or
when the list endpoint's query count grows with the page size."""

from __future__ import annotations

import pytest

from tests.ops.bench import run_quick_benchmark

pytestmark = pytest.mark.heavy


def test_quick_benchmark_runs_clean():
    stdout = run_quick_benchmark(
        "api_auth.py",
        *("--duration", "0.5", "--warmup", "0", "--redis-url", "redis://127.0.0.1:6379/0"),
        db_prefix="gpuaas_bench_smoke",
    )
    assert "query count independent of page size: yes" in stdout
    assert "| projects, CCP tenant admin (10 of 10)" in stdout
