"""Authenticated list endpoint under load: ``GET /api/v1/projects``.

Sets up its own PostgreSQL database, fills it with tenants and projects
(1,000 x 10 by default), starts a local JWKS issuer (CCP's Keycloak stand-in),
serves the real ASGI app with ``manage.py serve`` in production mode (REDIS_URL
set) in a subprocess, and drives it over loopback with httpx. Prints requests
per second and latency percentiles per scenario, then the number of SQL queries
per request for several page sizes, measured in process.

    .venv/bin/python benchmarks/api_auth.py            # full run (about two minutes)
    .venv/bin/python benchmarks/api_auth.py --quick    # CI smoke run

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) and Redis on
127.0.0.1:6379 (``make services`` starts both). The load generator shares the
machine with the server, so compare figures only within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    RESULT_HEADERS,
    Result,
    Server,
    benchmark_parser,
    configure_environment,
    drop_database,
    free_port,
    group_cpu_seconds,
    load_average,
    machine,
    print_table,
    recreate_database,
)

from tests.support.issuer import FakeIssuer


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(
        __doc__, quick="CI smoke run: 50 tenants, 2 s per scenario", db_name="gpuaas_bench"
    )
    parser.add_argument("--tenants", type=int, help="tenants to create (1000; quick: 50)")
    parser.add_argument("--projects-per-tenant", type=int, default=10)
    parser.add_argument("--duration", type=float, help="seconds of load per scenario (10; quick: 2)")
    parser.add_argument("--warmup", type=float, help="seconds of unmeasured load first (2; quick: 0.5)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (8)")
    parser.add_argument("--web-workers", type=int, default=1, help="uvicorn worker processes (1)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--keep-db", action="store_true", help="leave the database behind for inspection")
    args = parser.parse_args()
    args.tenants = args.tenants or (50 if args.quick else 1000)
    args.duration = args.duration or (2.0 if args.quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 2.0)
    if args.quick:
        args.concurrency = min(args.concurrency, 4)
    return args


# --- data --------------------------------------------------------------------


def seed(args) -> dict:
    """Bulk-create tenants, projects, one tenant-admin user per tenant and a
    platform service account; returns what the scenarios need."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from apps.tenancy import services
    from apps.tenancy.models import Membership, Project, Tenant
    from apps.tenancy.principal import Grant, Principal
    from apps.tenancy.roles import Role

    started = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    migrated = time.perf_counter()

    tenants = Tenant.objects.bulk_create(
        [
            Tenant(
                tenant_id=f"t{i:04d}",
                name=f"Tenant {i:04d}",
                realm_name=f"t{i:04d}",
                status=Tenant.Status.ACTIVE,
            )
            for i in range(args.tenants)
        ],
        batch_size=1000,
    )
    Project.objects.bulk_create(
        [
            Project(tenant=tenant, project_id=f"cell-{j:02d}", name=f"Cell {j:02d}")
            for tenant in tenants
            for j in range(args.projects_per_tenant)
        ],
        batch_size=2000,
    )
    User = get_user_model()
    users = User.objects.bulk_create(
        [User(username=f"admin-{tenant.tenant_id}", password="!") for tenant in tenants], batch_size=1000
    )
    Membership.objects.bulk_create(
        [
            Membership(user=user, tenant=tenant, role=Role.TENANT_ADMIN)
            for user, tenant in zip(users, tenants, strict=False)
        ],
        batch_size=1000,
    )
    operator = Principal(
        kind="operator", key="operator:bench", name="benchmark", grants=[Grant(Role.PLATFORM_ADMIN)]
    )
    account = services.create_platform_service_account(
        operator, name="bench-ccp", role=Role.PLATFORM_INTEGRATION
    )
    seeded = time.perf_counter()
    return {
        "tenant": tenants[len(tenants) // 2].tenant_id,
        "projects": Project.objects.count(),
        "client_id": account.account.client_id,
        "client_secret": account.client_secret,
        "migrate_s": migrated - started,
        "seed_s": seeded - migrated,
    }


# --- load --------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    method: str
    path: str
    headers: dict
    body: dict | None = None
    expect_count: int | None = None


async def _drive(base_url: str, scenario: Scenario, seconds: float, concurrency: int) -> Result:
    latencies: list[float] = []
    errors = 0
    first_error: list[str] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30.0) as client:
        stop_at = time.perf_counter() + seconds

        async def worker():
            nonlocal errors
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                try:
                    response = await client.request(
                        scenario.method, scenario.path, headers=scenario.headers, data=scenario.body
                    )
                    ok = response.status_code == 200
                    if ok and scenario.expect_count is not None:
                        ok = response.json()["count"] == scenario.expect_count
                except httpx.HTTPError as exc:
                    response, ok = None, False
                    first_error.append(repr(exc))
                if ok:
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    errors += 1
                    if response is not None and not first_error:
                        first_error.append(f"{response.status_code} {response.text[:300]}")

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    if first_error:
        print(f"  {scenario.name}: first error: {first_error[0]}", file=sys.stderr)
    return Result(scenario.name, len(latencies), errors, elapsed, latencies)


async def _burst(base_url: str, path: str, headers: dict, count: int) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as client:
        responses = await asyncio.gather(*(client.get(path, headers=headers) for _ in range(count)))
    return [response.status_code for response in responses]


def cold_start_burst(base_url: str, headers: dict, count: int) -> list[int]:
    """The first requests bearing a token of an issuer whose keys no cache holds yet."""
    return asyncio.run(_burst(base_url, "/api/v1/projects", headers, count))


def run_load(base_url: str, scenario: Scenario, args, server_pgid: int) -> Result:
    response = httpx.request(
        scenario.method, base_url + scenario.path, headers=scenario.headers, data=scenario.body
    )
    if response.status_code != 200:
        raise RuntimeError(f"{scenario.name}: {response.status_code} {response.text[:300]}")
    if args.warmup:
        asyncio.run(_drive(base_url, scenario, args.warmup, args.concurrency))
    cpu_before = group_cpu_seconds(server_pgid)
    result = asyncio.run(_drive(base_url, scenario, args.duration, args.concurrency))
    result.server_cpu_s = group_cpu_seconds(server_pgid) - cpu_before
    return result


# --- query counts (in process) -----------------------------------------------


def query_counts(scenarios: list[tuple[str, dict]], page_sizes: list[int]) -> list[tuple[str, int, int, int]]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    rows = []
    for name, headers in scenarios:
        extra = {f"HTTP_{key.upper().replace('-', '_')}": value for key, value in headers.items()}
        client.get("/api/v1/projects", **extra)  # warm: JWKS fetch, signing-key load
        for size in page_sizes:
            with CaptureQueriesContext(connection) as queries:
                response = client.get("/api/v1/projects", {"page_size": size}, **extra)
            assert response.status_code == 200, response.content[:300]
            rows.append((name, size, len(response.json()["results"]), len(queries.captured_queries)))
    return rows


def explain_platform_page(page: int, size: int) -> list[str]:
    """The plan of the platform-wide page query, to see where the time goes."""
    from django.db import connection

    from apps.tenancy.models import Project

    queryset = Project.objects.select_related("tenant")[(page - 1) * size : page * size]
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF) {sql}", params)
        return [row[0] for row in cursor.fetchall()]


def main() -> int:
    args = parse_args()
    port = free_port()
    issuer = FakeIssuer()
    recreate_database(args.db_name)
    server = None
    try:
        with tempfile.TemporaryDirectory(prefix="gpuaas-bench-") as var_dir:
            env = configure_environment(args, issuer, port, var_dir)
            Path(var_dir, "static").mkdir()  # production serves collected files from here; none are needed
            import django

            django.setup()
            data = seed(args)
            print(f"# {machine()}")
            print(
                f"# load average before: {load_average()} (other work on the machine skews req/s and latency)"
            )
            print(
                f"# {args.tenants} tenants, {data['projects']} projects; migrate {data['migrate_s']:.1f} s, "
                f"seed {data['seed_s']:.1f} s; {args.duration:g} s per scenario after {args.warmup:g} s "
                f"warm-up, {args.concurrency} in flight, {args.web_workers} web worker(s)"
            )

            server = Server(port, env, args.web_workers, Path(var_dir) / "server.log")
            server.wait_ready()

            tenant_admin = issuer.token(
                {
                    "domain_id": data["tenant"],
                    "roles": ["Tenant Administrator"],
                    "preferred_username": "bench-tenant-admin",
                },
                lifetime=3600,
            )
            integration = issuer.token(
                {"roles": ["GPUaaS Platform Integration"], "azp": "ccp-portal"}, lifetime=3600
            )
            token = httpx.post(
                f"{server.url}/api/v1/auth/token",
                data={
                    "grant_type": "client_credentials",
                    "client_id": data["client_id"],
                    "client_secret": data["client_secret"],
                },
            ).json()["access_token"]

            def bearer(value: str) -> dict:
                return {"Authorization": f"Bearer {value}"}

            cold = cold_start_burst(server.url, bearer(tenant_admin), args.concurrency)
            cold_rejected = sum(1 for status in cold if status != 200)

            total = data["projects"]
            last_page = max(1, (total + 49) // 50)
            scenarios = [
                Scenario("GET /healthz (no auth, no SQL: the floor)", "GET", "/healthz", {}),
                Scenario(
                    "projects, CCP tenant admin (10 of 10)",
                    "GET",
                    "/api/v1/projects",
                    bearer(tenant_admin),
                    expect_count=args.projects_per_tenant,
                ),
                Scenario(
                    f"projects, CCP platform integration, page 1 of {total}",
                    "GET",
                    "/api/v1/projects?page_size=50",
                    bearer(integration),
                    expect_count=total,
                ),
                Scenario(
                    f"projects, CCP platform integration, page {last_page} (last)",
                    "GET",
                    f"/api/v1/projects?page_size=50&page={last_page}",
                    bearer(integration),
                    expect_count=total,
                ),
                Scenario(
                    f"projects, platform service account token, page 1 of {total}",
                    "GET",
                    "/api/v1/projects?page_size=50",
                    bearer(token),
                    expect_count=total,
                ),
                Scenario(
                    "POST /api/v1/auth/token (client credentials)",
                    "POST",
                    "/api/v1/auth/token",
                    {},
                    body={
                        "grant_type": "client_credentials",
                        "client_id": data["client_id"],
                        "client_secret": data["client_secret"],
                    },
                ),
            ]
            results = []
            for scenario in scenarios:
                result = run_load(server.url, scenario, args, server.process.pid)
                results.append(result)
                print(f"  {scenario.name}: {result.rps:.0f} req/s", file=sys.stderr)
            server.stop()

            print()
            print(
                f"Cold JWKS cache: {cold_rejected} of {len(cold)} concurrent first requests with a valid "
                f"CCP token answered {sorted(set(cold))} (all should be 200)."
            )
            print()
            print("Throughput and latency (loopback, httpx asyncio client in the same machine):")
            print()
            print_table(RESULT_HEADERS, [r.cells() for r in results])

            rows = query_counts(
                [
                    ("CCP tenant admin", bearer(tenant_admin)),
                    ("CCP platform integration", bearer(integration)),
                    ("platform service account", bearer(token)),
                ],
                [10, 50, 200],
            )
            print()
            print("SQL queries per request, GET /api/v1/projects (in process, CaptureQueriesContext):")
            print()
            print_table(["principal", "page_size", "results", "SQL queries"], [list(row) for row in rows])
            constant = {}
            for name, _, _, count in rows:
                constant.setdefault(name, set()).add(count)
            flat = all(len(counts) == 1 for counts in constant.values())
            print()
            print("query count independent of page size:", "yes" if flat else "NO")

            print()
            print(f"Plan of the platform-wide page query (page {last_page}, 50 rows):")
            for line in explain_platform_page(last_page, 50):
                print("    " + line)
            print()
            print(f"# load average after: {load_average()}")
            errors = sum(r.errors for r in results)
            from django.db import connections

            connections.close_all()
            return 0 if flat and errors == 0 else 1
    finally:
        if server is not None:
            server.stop()
        issuer.close()
        if not args.keep_db:
            drop_database(args.db_name)


if __name__ == "__main__":
    sys.exit(main())
