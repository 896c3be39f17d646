"""``benchmarks/terminal.py --quick`` as a smoke test: the portal in production mode
and a real node agent relay a terminal end to end; the figures are printed, their
goals judged by the benchmark itself (PASS/FAIL), not here."""

from __future__ import annotations

import pytest

from tests.ops.bench import run_quick_benchmark

pytestmark = pytest.mark.heavy


def test_quick_terminal_benchmark_runs_clean():
    stdout = run_quick_benchmark(
        "terminal.py", "--redis-url", "redis://127.0.0.1:6379/0", db_prefix="gpuaas_bench_terminal_smoke"
    )
    assert "| echo round trip p99 ms" in stdout
    assert "| cat throughput MB/s" in stdout
    assert "| portal RSS growth MB" in stdout
