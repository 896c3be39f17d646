"""The node's own CPU and memory utilization, as the agent reads them from ``/proc``
(fixture copies of ``stat`` and ``meminfo`` in ``proc/``, and this machine's own)."""

from __future__ import annotations

import shutil
from pathlib import Path

from node_agent.telemetry import NodeUsage, cpu_times, memory_utilization

PROC = Path(__file__).parent / "proc"


def test_cpu_times_count_idle_and_iowait_as_idle_and_leave_guest_time_in_user():
    # idle 8000 + iowait 500; user, nice, system, idle, iowait, irq, softirq, steal.
    assert cpu_times((PROC / "stat-before").read_text()) == (8500, 10000)
    # The guest column (50) is already part of user time: not counted twice.
    assert cpu_times((PROC / "stat-after").read_text()) == (8800, 11000)
    assert cpu_times("intr 1 2 3\n") is None


def test_memory_utilization_counts_available_memory_as_free():
    # 16 GB of 64 GB available (most of it page cache): 75 % used, not 98.5 %.
    assert memory_utilization((PROC / "meminfo").read_text()) == 75.0
    assert memory_utilization("MemTotal: 1000 kB\n") is None  # kernels before 3.14


def test_cpu_utilization_is_the_busy_share_of_the_time_between_two_reads(tmp_path):
    shutil.copy(PROC / "stat-before", tmp_path / "stat")
    shutil.copy(PROC / "meminfo", tmp_path / "meminfo")
    usage = NodeUsage(tmp_path)
    shutil.copy(PROC / "stat-after", tmp_path / "stat")
    # 1000 ticks went by, 300 of them idle or waiting on I/O.
    assert usage.read() == {"cpu_utilization": 70.0, "memory_utilization": 75.0}
    # No time went by since: no CPU figure rather than a made-up one.
    assert usage.read() == {"memory_utilization": 75.0}


def test_a_node_without_proc_reports_nothing_rather_than_failing(tmp_path):
    assert NodeUsage(tmp_path / "absent").read() == {}


def test_this_machines_own_readings_are_percentages():
    usage = NodeUsage()
    sum(range(5_000_000))  # some CPU time passes between the reads
    readings = usage.read()
    assert 0 <= readings["cpu_utilization"] <= 100
    assert 0 < readings["memory_utilization"] < 100
