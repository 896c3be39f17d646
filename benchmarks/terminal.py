"""The web terminal through the portal and a node agent's relay, on loopback.

Serves the portal in production mode (``manage.py serve``, PostgreSQL, Redis
channel layer) and runs a real node agent (``python -m node_agent``) whose shell
the terminal opens; a client speaking the page's protocol (tests/support/terminal.py)
stands in for the browser. It prints:

- keystroke-to-echo round trip (one character typed into ``cat``, until its echo
  arrives), p50/p99 over the keystrokes; goal p99 under 50 ms;
- ``cat`` of a 50 MB file through the terminal: MB/s from Enter to the end marker,
  and the portal's resident memory before and at its peak during the run; goals
  at least 20 MB/s, and memory flat (under 32 MB of growth);
- the session ended (as the end button does) to the browser's socket closed: the
  contract's promise that an open terminal closes within 2 s of what ends it.

    .venv/bin/python benchmarks/terminal.py            # 300 keystrokes, 50 MB
    .venv/bin/python benchmarks/terminal.py --quick    # 30 keystrokes, 5 MB (CI smoke)

Needs PostgreSQL and Redis (``make services``). Compare figures only within one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    benchmark_parser,
    group_rss_bytes,
    load_average,
    percentile,
    portal_with_agent,
    print_table,
    seed_jupyterlab_allocation,
    verdict,
)

P99_GOAL_MS = 50.0
THROUGHPUT_GOAL_MB_S = 20.0
MEMORY_GROWTH_LIMIT_MB = 32.0
CLOSE_GOAL_SECONDS = 2.0
MB = 1024 * 1024


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(
        __doc__, quick="30 keystrokes and 5 MB (CI smoke)", db_name="gpuaas_bench_terminal"
    )
    parser.add_argument("--keystrokes", type=int, default=300)
    parser.add_argument("--file-mb", type=int, default=50)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    args = parser.parse_args()
    if args.quick:
        args.keystrokes, args.file_mb = 30, 5
    return args


def seed() -> dict:
    """An ACTIVE allocation and a project admin signed in (a platform session)."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from apps.tenancy.models import Membership

    seeded = seed_jupyterlab_allocation(flavor_name="h100-1x", gpus=1, cpu_cores=16, memory_gb=256)
    user = get_user_model().objects.create_user("bench-admin", password="unused-" + os.urandom(8).hex())
    Membership.objects.create(
        user=user, tenant=seeded["project"].tenant, project=seeded["project"], role="project_admin"
    )
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return {**seeded, "session_key": session.session_key, "user": user}


class RssSampler(threading.Thread):
    def __init__(self, pgid: int):
        super().__init__(daemon=True)
        self.pgid, self.peak, self.stopping = pgid, 0.0, threading.Event()

    def run(self):
        while not self.stopping.wait(0.1):
            self.peak = max(self.peak, group_rss_bytes(self.pgid) / MB)


def round_trips(terminal, count: int) -> list[float]:
    """Type one character at a time into ``head`` and time each echo. ``head`` ends by
    itself after the last one: a ^C would race the next line, which a ``cat`` woken by
    both reads before its signal lands when the host is busy."""
    terminal.type(f"stty -icanon; head -c {count} >/dev/null; stty sane; echo ready-$((1+1))\r")
    terminal.expect(b"ready-$((1+1))")  # the line's own echo, so no letter of it is timed
    terminal.output.clear()
    latencies = []
    for i in range(count):
        char = "abcdefghijklmnopqrstuvwxyz"[i % 26]
        seen = len(terminal.output)
        started = time.perf_counter()
        terminal.type(char)
        terminal.read_until(lambda out, seen=seen, char=char: char.encode() in out[seen:], timeout=10)
        latencies.append((time.perf_counter() - started) * 1000)
    terminal.expect(b"ready-2")
    return latencies


def cat_file(terminal, path: Path, size: int, server_pgid: int) -> tuple[float, float, float]:
    """Seconds for ``cat`` of the file to come through, and the portal's RSS before and at peak."""
    terminal.output.clear()
    terminal.keep = False
    before = group_rss_bytes(server_pgid) / MB
    sampler = RssSampler(server_pgid)
    sampler.start()
    start_offset = terminal.received
    started = time.perf_counter()
    terminal.type(f"cat {path}; echo cat-$((40+2))-done\r")
    terminal.read_until(lambda out: b"cat-42-done" in out, timeout=600)
    elapsed = time.perf_counter() - started
    sampler.stopping.set()
    sampler.join()
    received = terminal.received - start_offset
    if received < size:
        raise RuntimeError(f"only {received} of {size} bytes came through")
    return elapsed, before, max(sampler.peak, before)


def end_to_close(terminal, user) -> float:
    """Seconds from the session's end (the end button's service call) to the portal
    closing the browser's socket with the terminal's code."""
    from apps.access import terminals
    from apps.access.models import TerminalSession
    from apps.tenancy import principal as principals

    session = TerminalSession.objects.get(pk=terminal.session_id)
    started = time.perf_counter()
    terminals.end_by_operator(principals.for_user(user), session)
    code = terminal.wait_closed(timeout=30)
    elapsed = time.perf_counter() - started
    if code != 4000:
        raise RuntimeError(f"the terminal closed with {code}, not 4000")
    return elapsed


def make_file(path: Path, megabytes: int) -> int:
    line = (b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" * 2)[:127] + b"\n"
    with open(path, "wb") as out:
        for _ in range(megabytes * MB // len(line)):
            out.write(line)
    return path.stat().st_size


def main() -> int:
    args = parse_args()
    with portal_with_agent(args, "gpuaas-bench-terminal-", seed, "--terminal-user", "agent") as (
        server,
        data,
        var_dir,
    ):
        from tests.support.terminal import Terminal

        terminal = Terminal(server, data["allocation"].pk, data["session_key"])
        try:
            terminal.connect(cols=120, rows=40)
            terminal.type("echo up-$((1+2))\r")
            terminal.expect(b"up-3", timeout=30)

            latencies = round_trips(terminal, args.keystrokes)
            big = Path(var_dir) / "big.txt"
            size = make_file(big, args.file_mb)
            elapsed, rss_before, rss_peak = cat_file(terminal, big, size, server.pgid)
            throughput = size / MB / elapsed
            growth = rss_peak - rss_before
            closed_after = end_to_close(terminal, data["user"])

            p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
            print()
            print_table(
                ["measure", "value", "goal", "result"],
                [
                    ["keystrokes", len(latencies), "", ""],
                    ["echo round trip p50 ms", f"{p50:.1f}", "", ""],
                    [
                        "echo round trip p99 ms",
                        f"{p99:.1f}",
                        f"< {P99_GOAL_MS:.0f}",
                        verdict(p99 < P99_GOAL_MS),
                    ],
                    [f"cat of {size / MB:.0f} MB, s", f"{elapsed:.2f}", "", ""],
                    [
                        "cat throughput MB/s",
                        f"{throughput:.1f}",
                        f">= {THROUGHPUT_GOAL_MB_S:.0f}",
                        verdict(throughput >= THROUGHPUT_GOAL_MB_S),
                    ],
                    ["portal RSS before MB", f"{rss_before:.0f}", "", ""],
                    ["portal RSS peak MB", f"{rss_peak:.0f}", "", ""],
                    [
                        "portal RSS growth MB",
                        f"{growth:.1f}",
                        f"< {MEMORY_GROWTH_LIMIT_MB:.0f}",
                        verdict(growth < MEMORY_GROWTH_LIMIT_MB),
                    ],
                    [
                        "session ended to socket closed, s",
                        f"{closed_after:.2f}",
                        f"< {CLOSE_GOAL_SECONDS:.0f}",
                        verdict(closed_after < CLOSE_GOAL_SECONDS),
                    ],
                ],
            )
            print()
            print(f"# load average after: {load_average()}")
            passed = (
                p99 < P99_GOAL_MS
                and throughput >= THROUGHPUT_GOAL_MB_S
                and growth < MEMORY_GROWTH_LIMIT_MB
                and closed_after < CLOSE_GOAL_SECONDS
            )
            print(verdict(passed))
            return 0
        finally:
            terminal.close()


if __name__ == "__main__":
    sys.exit(main())
