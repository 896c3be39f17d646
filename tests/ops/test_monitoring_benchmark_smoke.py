"""``benchmarks/monitoring.py --quick`` as a smoke test: it sets up its database,
a private Redis and a real VictoriaMetrics, ingests a small fleet's readings into
both stores and serves ``GET /api/metrics/gpu`` from each, exiting non-zero on a
failed request or a wrong answer. Its performance goals are printed, never asserted."""

from __future__ import annotations

import pytest

from tests.ops.bench import run_quick_benchmark

pytestmark = pytest.mark.heavy


def test_quick_monitoring_benchmark_runs_clean():
    stdout = run_quick_benchmark("monitoring.py", db_prefix="gpuaas_bench_mon_smoke", timeout=600)
    for goal in (
        "goal: embedded store ingests at >= 10x real time",
        "goal: VictoriaMetrics ingests at >= 10x real time",
        "goal: embedded store p95 < 300 ms",
        "goal: VictoriaMetrics p95 < 300 ms",
    ):
        assert goal in stdout
