"""``benchmarks/alerts.py --quick`` as a smoke test: a small fleet evaluated from
both stores, then a threshold crossing carried by the real beat and worker to a
local CCP receiver, which must verify its signature. Its performance goals are
printed, never asserted."""

from __future__ import annotations

import pytest

from tests.ops.bench import run_quick_benchmark

pytestmark = pytest.mark.heavy


def test_quick_alerts_benchmark_runs_clean():
    stdout = run_quick_benchmark("alerts.py", db_prefix="gpuaas_bench_alerts_smoke", timeout=600)
    for goal in (
        "goal: embedded store round < 2 s",
        "goal: VictoriaMetrics round < 2 s",
        "goal: gpu_memory_critical received < 60 s after its for",
        "goal: gpu_memory_critical received < for + 20 s",
    ):
        assert goal in stdout
