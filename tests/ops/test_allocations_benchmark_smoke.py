"""``benchmarks/allocations.py --quick`` as a smoke test: it sets up its database,
serves the app in production mode with Celery worker processes (prefork) and a
private Redis, runs a small allocation storm and the status lookups, and exits
non-zero on any failed request, an allocation that did not become ACTIVE, or a
node in two allocations. Its performance goals are printed, never asserted."""

from __future__ import annotations

import pytest

from tests.ops.bench import run_quick_benchmark

pytestmark = pytest.mark.heavy


def test_quick_allocations_benchmark_runs_clean():
    stdout = run_quick_benchmark(
        "allocations.py",
        *("--allocations", "24", "--single-runs", "1", "--status-requests", "40", "--crash-allocations", "1"),
        *("--status-nodes", "200", "--history", "500", "--probe-requests", "20"),
        db_prefix="gpuaas_bench_alloc_smoke",
        timeout=600,
    )
    for check in (
        "every POST answered 202",
        "every allocation ACTIVE",
        "all nodes distinct (database)",
        "no node in two live allocations",
    ):
        assert f"check: {check}: yes" in stdout
    assert "goal: storm time <=" in stdout
    assert "goal: resumed within 60 s of the kill" in stdout
    assert "| tenant admin, sequential" in stdout
