"""How soon the production topology answers while a dependency is down.

Starts ``make prod-local``'s topology (``python -m gpuaas.prodlocal``: nginx, two web
processes, a Celery worker and beat under supervisord) on a database of its own,
reached through a TCP path that can be cut, and a Redis of its own. Then, for each
dependency in turn (Redis killed; PostgreSQL's path cut, as a crash looks to its
clients), a burst of API and page requests, concurrently, through nginx and to each
web process, while it is down; then it is brought back and the first requests are
asked again.

Prints, per dependency: requests, status codes, max and p99 answer time, and a
PASS/FAIL line for the issue's goal: every request answers within 2 s, 503 with
``Retry-After`` where it needs what is down (the API always does; a page that does
without it may answer 200), never another 5xx; and the first requests after the
return answer 200.

    .venv/bin/python benchmarks/outages.py            # 10 rounds of the request mix
    .venv/bin/python benchmarks/outages.py --quick    # 2 rounds (a smoke run)

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth), ``redis-server`` and
Debian's nginx. Everything shares the machine: compare figures only within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    ROOT,
    Background,
    RedisServer,
    drop_database,
    free_port,
    load_average,
    machine,
    percentile,
    print_table,
    recreate_database,
)

from tests.support.processes import CuttablePath

GOAL_SECONDS = 2.0
# A request still unanswered after this counts as hung (and fails the goal).
CLIENT_TIMEOUT_SECONDS = 10.0
START_SECONDS = 600


def start_topology(args, state: Path, database: CuttablePath, redis: RedisServer):
    """prod-local, its database reached through ``database``; returns (process, ports)."""
    from gpuaas import prodlocal

    port, web_ports = free_port(), [free_port(), free_port()]
    env = {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{database.port}/{args.db_name}",
        "REDIS_URL": redis.url,
        "GPUAAS_BROKER_URL": "",
        "GPUAAS_VAR_DIR": str(state / "var"),
        "GPUAAS_LOG_LEVEL": "WARNING",
        "GPUAAS_API_RATE_LIMIT": "100000000/min",  # the burst is one principal's
    }
    os.environ.update(env)
    # The same settings in this process, which seeds the database the topology serves.
    os.environ.update(prodlocal.environment(state, port))
    process = Background(prodlocal.command(state, port, web_ports), {}, state.parent / "prod-local.log")
    bases = [f"http://localhost:{port}", *(f"http://127.0.0.1:{web}" for web in web_ports)]
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        process.check_alive("prod-local")
        with contextlib.suppress(httpx.HTTPError):
            if all(httpx.get(f"{base}/readyz", timeout=2).status_code == 200 for base in bases):
                return process, bases
        time.sleep(1)
    process.stop()
    raise SystemExit(f"prod-local not ready after {START_SECONDS} s; see {process.log_path}")


def seed() -> dict:
    """A tenant's project, a service account's token and a signed-in session."""
    import django

    django.setup()
    from apps.tenancy import principal as principals
    from apps.tenancy import services as tenancy
    from tests.factories import ProjectFactory, TenantFactory
    from tests.support.members import member
    from tests.support.pages import session_cookie

    tenant = TenantFactory(tenant_id="acme", name="Acme")
    project = ProjectFactory(tenant=tenant, project_id="cell-1", name="Cell 1")
    admin = principals.for_user(member("tenant_admin", tenant=tenant))
    issued = tenancy.create_service_account(admin, project, name="bench", role="project_admin")
    token, _ = tenancy.issue_token(issued.account.client_id, issued.client_secret)
    return {
        "project": str(project.pk),
        "bearer": {"Authorization": f"Bearer {token}"},
        "cookie": {"Cookie": session_cookie(member("project_admin", project=project))},
    }


def request_mix(bases: list[str], world: dict) -> list[tuple[str, str, dict]]:
    """(kind, url, headers): the API and pages a tenant's people and CCP use."""
    project, api, page = world["project"], world["bearer"], world["cookie"]
    mix = []
    for base in bases:
        mix += [
            ("api", f"{base}/api/v1/projects", api),
            ("api", f"{base}/api/v1/projects/{project}/allocations", api),
            ("api", f"{base}/api/v1/projects/{project}/app-instances", api),
            ("page", f"{base}/", page),
            ("page", f"{base}/projects/{project}/allocations/", page),
            ("page", f"{base}/accounts/login/", {}),
        ]
    return mix


async def burst(mix, rounds: int, concurrency: int) -> list[tuple[str, int | None, float, bool]]:
    """Every request of ``mix``, ``rounds`` times, ``concurrency`` at once:
    (kind, status or None if unanswered, seconds, Retry-After present)."""
    limit = asyncio.Semaphore(concurrency)
    results = []

    async def one(client: httpx.AsyncClient, kind: str, url: str, headers: dict) -> None:
        async with limit:
            began = time.perf_counter()
            try:
                response = await client.get(url, headers=headers)
                status, retry = response.status_code, "Retry-After" in response.headers
            except httpx.HTTPError:
                status, retry = None, False
            results.append((kind, status, time.perf_counter() - began, retry))

    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_SECONDS, follow_redirects=False) as client:
        await asyncio.gather(*(one(client, *request) for _ in range(rounds) for request in mix))
    return results


def verdict(results) -> tuple[bool, list[str]]:
    problems = []
    slow = [r for r in results if r[1] is None or r[2] > GOAL_SECONDS]
    if slow:
        problems.append(f"{len(slow)} over {GOAL_SECONDS:g} s or unanswered")
    wrong = [r for r in results if r[1] is not None and r[1] >= 500 and r[1] != 503]
    if wrong:
        problems.append(f"{len(wrong)} answered another 5xx")
    api_not_503 = [r for r in results if r[0] == "api" and r[1] != 503]
    if api_not_503:
        problems.append(f"{len(api_not_503)} API requests not 503")
    no_retry = [r for r in results if r[1] == 503 and not r[3]]
    if no_retry:
        problems.append(f"{len(no_retry)} 503s without Retry-After")
    return not problems, problems


def first_after_return(mix) -> Counter:
    return Counter(
        httpx.get(url, headers=headers, timeout=CLIENT_TIMEOUT_SECONDS).status_code for _, url, headers in mix
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=10, help="times the request mix is sent per outage")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--db-name", default="gpuaas_outages_bench")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds

    recreate_database(args.db_name)
    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-bench-outages-"))
    redis = RedisServer(free_port(), tmp / "redis.log", str(tmp))
    redis.wait_ready()
    database = CuttablePath(("127.0.0.1", 5432))
    process = None
    failed = False
    try:
        process, bases = start_topology(args, tmp / "state", database, redis)
        world = seed()
        host = machine()  # asks the database this process reaches through the path about to be cut
        mix = request_mix(bases, world)
        outages = {
            "redis": (redis.stop, lambda: (redis.restart(), redis.wait_ready())),
            "postgresql": (database.cut, database.restore),
        }
        rows, lines = [], []
        for name, (down, up) in outages.items():
            down()
            results = asyncio.run(burst(mix, rounds, args.concurrency))
            up()
            returned = time.monotonic()
            while True:  # what a load balancer waits for before it sends traffic back
                with contextlib.suppress(httpx.HTTPError):
                    if all(httpx.get(f"{b}/readyz", timeout=2).status_code == 200 for b in bases):
                        break
                time.sleep(0.2)
            ready_after = time.monotonic() - returned
            first = first_after_return(mix)
            ok, problems = verdict(results)
            ok = ok and set(first) == {200}
            failed |= not ok
            seconds = [r[2] for r in results]
            codes = Counter("hung" if r[1] is None else r[1] for r in results)
            rows.append(
                [
                    name,
                    len(results),
                    " ".join(f"{code}:{count}" for code, count in sorted(codes.items(), key=str)),
                    f"{max(seconds) * 1000:.0f}",
                    f"{percentile(seconds, 99) * 1000:.0f}",
                    f"{ready_after:.1f}",
                    " ".join(f"{code}:{count}" for code, count in sorted(first.items())),
                ]
            )
            lines.append(
                f"{'PASS' if ok else 'FAIL'} {name} down: every request answered within {GOAL_SECONDS:g} s, "
                f"503 with Retry-After where it needs {name}, none other 5xx; first requests after "
                f"its return 200" + (f" ({'; '.join(problems)})" if problems else "")
            )
        print(f"machine: {host}; load average: {load_average()}")
        print(
            f"topology: prod-local (nginx, 2 web, worker, beat); {rounds} rounds x {len(mix)} requests, "
            f"{args.concurrency} at once"
        )
        print_table(
            ["down", "requests", "status:count", "max ms", "p99 ms", "ready after s", "first after return"],
            rows,
        )
        for line in lines:
            print(line)
    finally:
        if process is not None:
            process.stop(timeout=90)
        database.cut()
        redis.stop()
        drop_database(args.db_name)
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
