"""Load at scale: the production topology under a mixed load, at a large platform's size.

Runs ``make prod-local``'s topology (``gpuaas.prodlocal``: two ``serve`` web processes
behind Debian's nginx with its Lua data plane, a Celery worker and beat, under
supervisord) on 127.0.0.1 against its own PostgreSQL database and Redis database,
seeded with 10,000 nodes, 1,000 tenants (three projects each, a tenant administrator
and a member per project), 100,000 past allocations and two audit rows for each, and
20,000 past app instances. The seed is written in bulk and kept: a rerun on the same
database skips it.

Then locust, headless and bounded in time (``benchmarks/load_users.py``), mixes:

- portal users signed in with sessions: dashboard, allocation list and detail, usage;
- an operator paging the platform-wide project list;
- CCP's integration with its JWTs: allocate, status polling, release (and the status
  of nodes the tenant held before);
- app visitors: an app's route through the nginx data plane, to a static nginx upstream.

It prints throughput and p50/p95/p99 per endpoint and per class, the errors, the
machine and the settings, and a PASS/FAIL line for the goal: p95 under 300 ms for
pages and API, zero errors (issue 20). Then EXPLAIN of every query the hot lists run
(allocation lists per project and platform-wide, app instances, the audit trail, the
platform-wide project list), as the portal, the API and the operations pages run them
at the seeded scale: a sequential scan over allocations, app instances or audit rows
is a FAIL.

    .venv/bin/python benchmarks/load.py            # seed once (a few minutes), then 120 s of load
    .venv/bin/python benchmarks/load.py --quick    # CI smoke: a small seed, a few seconds

Exits non-zero on a failed request (and, at full scale, on a sequential scan);
missing the latency goal only prints FAIL. Needs PostgreSQL, Redis and nginx with its
Lua module (``make services nginx``). Locust, the processes under test and PostgreSQL
share the machine: say its load with the figures, compare only within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    ROOT,
    Background,
    add_nodes,
    free_port,
    h100_flavor,
    load_average,
    machine,
    percentile,
    print_table,
    seed_past_allocations,
)

from tests.support.issuer import FakeIssuer

FLAVOR = "h100-8x"
OS_IMAGE = "ubuntu-22.04"
PREFIX = "load-"  # seeded tenants' CCP ids; the seed's allocations are requested_by "load-seed"
PROJECTS_PER_TENANT = 3
LIVE_TENANTS = 50  # with a network and storage: the ones CCP clients allocate in
GOAL_P95_MS = 300.0
GOAL_CLASSES = ("page", "api")
# collectstatic alone took minutes on a machine loaded by other work.
START_PATIENCE_SECONDS = 600
# The tables whose sequential scan fails the plan check (a scan of the small ones,
# flavors or tenants, is the planner's right choice).
WATCHED_TABLES = ("allocations_allocation", "runtime_appinstance", "core_auditevent")
# and, outside a count, the projects: the platform-wide project list reads a page of them
# in index order instead of sorting them all.

FULL = {"nodes": 10_000, "tenants": 1_000, "history": 100_000}
QUICK = {"nodes": 300, "tenants": 20, "history": 3_000}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small seed and a few seconds of load")
    parser.add_argument(
        "--db-name", default=None, help="PostgreSQL database (gpuaas_load; quick: gpuaas_load_quick)"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--state", default=None, help="prod-local's state directory (kept with the seed)")
    parser.add_argument("--duration", type=float, default=None, help="seconds measured (120; quick: 5)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds of load before (15; quick: 0)")
    parser.add_argument("--portal-users", type=int, default=None)
    parser.add_argument("--ccp-clients", type=int, default=None)
    parser.add_argument("--proxy-users", type=int, default=None)
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument("--worker-concurrency", default="2")
    parser.add_argument("--step-seconds", default="0.5", help="the simulated hardware's latency per step")
    parser.add_argument("--reseed", action="store_true", help="drop the database and seed again")
    parser.add_argument("--seed-only", action="store_true", help="seed (when needed), then stop")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end (the smoke test's)")
    args = parser.parse_args()
    quick = args.quick
    args.sizes = QUICK if quick else FULL
    args.db_name = args.db_name or ("gpuaas_load_quick" if quick else "gpuaas_load")
    args.duration = args.duration or (5.0 if quick else 120.0)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if quick else 15.0)
    args.portal_users = args.portal_users if args.portal_users is not None else (4 if quick else 30)
    args.ccp_clients = args.ccp_clients if args.ccp_clients is not None else (2 if quick else 10)
    args.proxy_users = args.proxy_users if args.proxy_users is not None else (1 if quick else 5)
    args.ccp_clients = min(args.ccp_clients, LIVE_TENANTS, args.sizes["tenants"])
    return args


# --- the seed ----------------------------------------------------------------


def seeded(sizes: dict) -> bool:
    from apps.allocations.models import Allocation
    from apps.tenancy.models import Tenant

    return (
        Tenant.objects.filter(tenant_id__startswith=PREFIX).count() == sizes["tenants"]
        and Allocation.objects.filter(requested_by="load-seed").count() == sizes["history"]
    )


def seed(sizes: dict, upstream_port: int) -> None:
    """The platform at ``sizes``, written in bulk."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from apps.networking import services as networking
    from apps.storage import services as storage
    from apps.tenancy.models import Membership, Project, Quota, Tenant

    User = get_user_model()
    rng = random.Random(20)
    with transaction.atomic():
        flavor = h100_flavor(FLAVOR)
        add_nodes(flavor, range(sizes["nodes"]))
        tenants = Tenant.objects.bulk_create(
            Tenant(tenant_id=f"{PREFIX}{i:04d}", name=f"Tenant {i:04d}", realm_name=f"t{i}", status="active")
            for i in range(sizes["tenants"])
        )
        projects = Project.objects.bulk_create(
            Project(tenant=tenant, project_id=f"cell-{j}", name=f"Cell {j}")
            for tenant in tenants
            for j in range(PROJECTS_PER_TENANT)
        )
        Quota.objects.bulk_create(
            Quota(tenant=tenant, resource=resource, limit=limit)
            for tenant in tenants
            for resource, limit in (("gpus", 8_000), ("nodes", 1_000), ("storage_gb", 1_000_000))
        )
        # No password: people sign in through sessions the script makes (no hashing to pay for).
        admins = User.objects.bulk_create(
            User(username=f"admin-{t.tenant_id}", password="!") for t in tenants
        )
        members = User.objects.bulk_create(
            User(username=f"member-{p.tenant.tenant_id}-{p.project_id}", password="!") for p in projects
        )
        Membership.objects.bulk_create(
            [Membership(user=u, tenant=t, role="tenant_admin") for u, t in zip(admins, tenants, strict=True)]
            + [
                Membership(user=u, tenant=p.tenant, project=p, role="project_admin")
                for u, p in zip(members, projects, strict=True)
            ]
        )
        operator = User.objects.create(
            username="load-operator", password="!", is_staff=True, is_superuser=True
        )
        Membership.objects.create(user=operator, role="platform_admin")

        seed_past_allocations(
            projects,
            flavor,
            OS_IMAGE,
            count=sizes["history"],
            requested_by="load-seed",
            failure_rate=0.05,
            days=730,
            rng=rng,
        )
        with connection.cursor() as cursor:
            # The audit rows those allocations left: their creation and their end.
            for action, at in (("allocation.create", "created_at"), ("allocation.release", "finished_at")):
                cursor.execute(
                    "INSERT INTO core_auditevent (occurred_at, actor, actor_type, action, target_type, "
                    "target_id, tenant_id, project_id, outcome, correlation_id, details) "
                    f"SELECT {at}, 'ccp', 'ccp', %s, 'allocation', id::text, tenant_id, project_id, "
                    "'success', md5(random()::text), '{}'::jsonb FROM allocations_allocation "
                    "WHERE requested_by = 'load-seed'",
                    [action],
                )
        live = tenants[:LIVE_TENANTS]
        networking.load_pool(prefix="vrf", count=len(live), first_vni=50001, first_vlan=1000)
        for tenant in live:
            networking.assign_tenant_network(tenant)
            storage.provision_tenant_storage(tenant)
        seed_app_instances(sizes, flavor, projects, upstream_port)
    with connection.cursor() as cursor:
        for table in (
            "allocations_allocation",
            "allocations_node",
            "core_auditevent",
            "runtime_appinstance",
            "tenancy_tenant",
            "tenancy_project",
            "tenancy_membership",
            "auth_user",
        ):
            cursor.execute(f"VACUUM ANALYZE {table}")


def seed_app_instances(sizes: dict, flavor, projects, upstream_port: int) -> None:
    """One running JupyterLab (the app visitors' route) on a live allocation of the first
    tenant's first project, and a fifth as many past instances as allocations."""
    from apps.allocations.models import Allocation, Node
    from apps.runtime.models import AppInstance
    from apps.tenancy.models import Membership
    from tests.support.catalog import publish
    from tests.support.proxy import start_instance

    project = projects[0]
    node = Node.objects.create(
        hostname="load-app-node",
        flavor=flavor,
        state=Node.State.ALLOCATED,
        approved=True,
        credential_hash="0" * 64,  # an enrolled agent, which the seed plays
        agent_address="127.0.0.1",
    )
    allocation = Allocation.objects.create(
        node=node,
        tenant_id=project.tenant_id,
        project=project,
        flavor=flavor,
        gpus=8,
        os_image=OS_IMAGE,
        state="ACTIVE",
        progress=100,
        requested_by="load-app",
    )
    app = publish("jupyterlab")
    owner = Membership.objects.get(project=project).user
    template = start_instance(owner, project, allocation, app, host="127.0.0.1", port=upstream_port)
    past = Allocation.objects.filter(requested_by="load-seed").values_list("id", "tenant_id", "project_id")
    AppInstance.objects.bulk_create(
        (
            AppInstance(
                tenant_id=tenant,
                project_id=project_id,
                app=app,
                app_version=template.app_version,
                allocation_id=allocation_id,
                name="jupyterlab",
                created_by="load-seed",
                state="deleted",
            )
            for allocation_id, tenant, project_id in past[: sizes["history"] // 5]
        ),
        batch_size=5000,
    )


# --- the run -------------------------------------------------------------------


def app_route(upstream_port: int, origin_port: int) -> dict:
    """The load app's route pointed at this run's upstream, and a route cookie for it,
    as the launcher's browser gets one: a ticket posted to the route's origin."""
    from apps.proxy.models import ProxyRoute
    from apps.runtime.models import AppInstance
    from tests.support.proxy import mint_ticket

    instance = AppInstance.objects.select_related("owner").get(
        allocation__requested_by="load-app", state="running"
    )
    routes = ProxyRoute.objects.filter(instance=instance)
    public = urlsplit(routes.get().public_url)
    host = f"{public.hostname}:{origin_port}"
    # The portal's port is this run's: the route's origin follows it, as it would have
    # been made on this address.
    routes.update(upstream_port=upstream_port, public_url=public._replace(netloc=host).geturl())
    ticket = mint_ticket(instance.owner, instance)
    response = httpx.post(
        f"http://127.0.0.1:{origin_port}/_gpuaas/session",
        data={"ticket": ticket["ticket"]},
        headers={"Host": host},
        trust_env=False,
        timeout=30,
    )
    cookie = response.cookies.get("_gpuaas_route")
    if response.status_code != 303 or not cookie:
        raise RuntimeError(f"ticket exchange answered {response.status_code}: {response.text[:300]}")
    return {"host": host, "path": public.path or "/", "cookie": f"_gpuaas_route={cookie}"}


def plan(args, issuer: FakeIssuer, origin_port: int, upstream_port: int) -> dict:
    """Who signs in as what: sessions, CCP tokens, the app route."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from apps.allocations.models import Allocation
    from apps.tenancy.models import Membership, Project
    from tests.support.proxy import login_session

    User = get_user_model()
    rng = random.Random()
    cookie = settings.SESSION_COOKIE_NAME
    tenants = args.sizes["tenants"]
    portal = []
    for index in rng.sample(range(tenants), min(args.portal_users, tenants)):
        tenant_id = f"{PREFIX}{index:04d}"
        admin = Membership.objects.select_related("user", "tenant").get(
            tenant__tenant_id=tenant_id, role="tenant_admin"
        )
        project = Project.objects.filter(tenant=admin.tenant).order_by("project_id").first()
        allocations = list(
            Allocation.objects.filter(project=project)
            .order_by("-created_at")
            .values_list("id", flat=True)[:20]
        )
        portal.append(
            {
                "cookie": f"{cookie}={login_session(admin.user).session_key}",
                "tenant": tenant_id,
                "project": str(project.pk),
                "allocations": [str(a) for a in allocations],
            }
        )
    ccp = []
    for index in range(args.ccp_clients):
        tenant_id = f"{PREFIX}{index:04d}"
        past = Allocation.objects.filter(tenant__tenant_id=tenant_id, project__project_id="cell-1")
        claims = {
            "domain_id": tenant_id,
            "project_id": "cell-1",
            "roles": ["Cell Administrator"],
            "preferred_username": f"ccp@{tenant_id}",
        }
        ccp.append(
            {
                "token": issuer.token(claims, lifetime=3600 + int(args.duration)),
                "tenant_id": tenant_id,
                "project_id": "cell-1",
                "past_nodes": [str(n) for n in past.values_list("node_id", flat=True)[:50]],
            }
        )
    operator = User.objects.get(username="load-operator")
    return {
        "portal_users": len(portal),
        "portal": portal,
        "operators": 1,
        "operator_cookie": f"{cookie}={login_session(operator).session_key}",
        "project_pages": max(1, tenants * PROJECTS_PER_TENANT // 25),
        "ccp_clients": len(ccp),
        "ccp": ccp,
        "flavor": FLAVOR,
        "os_image": OS_IMAGE,
        "proxy_users": args.proxy_users,
        "warmup": args.warmup,
        "proxy": app_route(upstream_port, origin_port),
    }


def wait_ready(urls: list[str], process: Background) -> None:
    deadline = time.monotonic() + START_PATIENCE_SECONDS
    while time.monotonic() < deadline:
        process.check_alive("prod-local")
        try:
            if all(httpx.get(f"{url}/readyz", timeout=2).status_code == 200 for url in urls):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"prod-local not ready after {START_PATIENCE_SECONDS} s (see {process.log_path})")


def run_locust(args, data: dict, host: str, work: Path) -> dict:
    plan_path, out_path = work / "plan.json", work / "out.json"
    plan_path.write_text(json.dumps(data))
    users = data["portal_users"] + data["operators"] + data["ccp_clients"] + data["proxy_users"]
    command = [
        *(sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "load_users.py")),
        *("--headless", "--only-summary", "--loglevel", "WARNING", "--host", host),
        *(
            "--users",
            str(users),
            "--spawn-rate",
            str(users),
            "--run-time",
            f"{args.duration + args.warmup:.0f}s",
        ),
        "--stop-timeout",
        "5",
    ]
    env = {**os.environ, "GPUAAS_LOAD_PLAN": str(plan_path), "GPUAAS_LOAD_OUT": str(out_path)}
    with open(work / "locust.log", "wb") as log:
        subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.duration + args.warmup + 120
        )
    if not out_path.exists():
        raise RuntimeError(f"locust wrote no figures: {(work / 'locust.log').read_text()[-2000:]}")
    return json.loads(out_path.read_text())


def cpu_seconds(supervisord: int, db_name: str) -> dict[str, float]:
    """CPU seconds used so far: by the topology's programs (supervisord's children, by
    their command), the database's backends, this script's finished children (locust)
    and the whole machine (busy time)."""
    import resource

    import psutil

    used = dict.fromkeys(("web", "nginx", "worker and beat", "PostgreSQL"), 0.0)

    def add(kind: str, process: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            used[kind] += times.user + times.system

    for process in psutil.Process(supervisord).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = " ".join(process.cmdline())
            kind = "web" if " serve " in command else "nginx" if "nginx" in command else "worker and beat"
            add(kind, process)
    for process in psutil.process_iter(["name", "cmdline"]):
        # A backend's title: "postgres: 15/main: postgres <database> 127.0.0.1(port) idle".
        if process.info["name"] == "postgres" and f" {db_name} " in " ".join(process.info["cmdline"] or []):
            add("PostgreSQL", process)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    used["locust"] = children.ru_utime + children.ru_stime
    machine = psutil.cpu_times()
    used["machine"] = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
    return used


def report_cpu(used: dict[str, float], out: dict) -> None:
    """Where the CPU went during the load, and the web processes' CPU per request: unlike
    latency, barely moved by other work on the machine."""
    served = out.get("all_requests", {})
    requests = served.get("page", 0) + served.get("api", 0)
    ours = sum(v for k, v in used.items() if k != "machine")
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in used.items() if k != "machine")
    print(
        f"\nCPU during the load: {parts}; the machine {used['machine']:.0f} s, of which "
        f"{max(0.0, used['machine'] - ours):.0f} s other work"
    )
    if requests:
        print(
            f"web processes' CPU per page or API request (the app visitors' share included): "
            f"{used['web'] * 1000 / requests:.0f} ms over {requests} requests"
        )


# --- query plans ---------------------------------------------------------------


def hot_lists() -> list[tuple[str, str, str]]:
    """(what, who, path): the lists the plan check runs, as the operator (``operator``)
    or a seeded tenant administrator (``tenant``)."""
    from apps.tenancy.models import Project

    project = Project.objects.get(tenant__tenant_id=f"{PREFIX}0001", project_id="cell-1")
    return [
        ("allocation list, portal", "tenant", f"/projects/{project.pk}/allocations/"),
        ("allocation list, API", "tenant", f"/api/v1/projects/{project.pk}/allocations"),
        ("allocation list, platform-wide", "operator", "/admin/allocations/allocation/"),
        ("app instances, portal", "tenant", f"/projects/{project.pk}/instances/"),
        ("app instances, API", "tenant", f"/api/v1/projects/{project.pk}/app-instances"),
        ("app instances, platform-wide", "operator", "/admin/runtime/appinstance/"),
        ("audit list, portal", "tenant", "/audit/"),
        ("audit list, API", "tenant", "/api/v1/audit"),
        ("audit list, platform-wide", "operator", "/admin/core/auditevent/"),
        ("project list, platform-wide portal", "operator", "/projects/?page=2"),
        ("project list, platform-wide API", "operator", "/api/v1/projects?page=2"),
    ]


def explain_hot_lists() -> list[tuple[str, int, float, list[str]]]:
    """For each hot list: its status, how long its second request took (the first fills
    the caches an operator's next page finds) and the sequential scans over the watched
    tables in the plans of the queries it ran (the plan lines printed)."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    User = get_user_model()
    clients = {
        "operator": User.objects.get(username="load-operator"),
        "tenant": User.objects.get(username=f"admin-{PREFIX}0001"),
    }
    for who, user in clients.items():
        clients[who] = Client(HTTP_HOST="localhost")
        clients[who].force_login(user)
    found = []
    for what, who, path in hot_lists():
        clients[who].get(path)
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            status = clients[who].get(path).status_code
            elapsed_ms = (time.perf_counter() - started) * 1000
        scans = []
        with connection.cursor() as cursor:
            for query in queries.captured_queries:
                sql = query["sql"]
                # A project list reads a page of projects; counting them all is its paginator's business.
                tables = WATCHED_TABLES + (() if "COUNT(*)" in sql else ("tenancy_project",))
                if not sql.lstrip().upper().startswith("SELECT") or not any(t in sql for t in tables):
                    continue
                cursor.execute("EXPLAIN " + sql)
                lines = [row[0] for row in cursor.fetchall()]
                scans += [
                    line.strip() for line in lines if "Seq Scan" in line and any(t in line for t in tables)
                ]
        found.append((what, status, elapsed_ms, scans))
    return found


# --- report --------------------------------------------------------------------


def settings_line(args, env: dict[str, str]) -> str:
    pool = env.get("GPUAAS_DB_POOL_SIZE") or "10"
    return (
        f"{args.web_processes} web processes (uvicorn, one each) behind nginx, DB pool up to {pool} "
        f"connections each (timeout {env.get('GPUAAS_DB_POOL_TIMEOUT') or '1.5'} s), Celery worker "
        f"concurrency {args.worker_concurrency} (prefork) and beat, simulated hardware "
        f"{args.step_seconds} s a step; locust (one process): {args.portal_users} portal users, 1 operator, "
        f"{args.ccp_clients} CCP clients, {args.proxy_users} app visitors, "
        f"{args.duration:.0f} s measured after {args.warmup:.0f} s"
    )


def report(out: dict) -> bool:
    """The tables; True when the goal is met."""
    samples: dict[str, list[float]] = out["samples"]
    window = out["window"]
    seconds = max((window["last"] or 0) - (window["first"] or 0), 1e-9)
    errors_by_name: dict[str, int] = {}
    for error in out["errors"]:
        name = error.split(":", 1)[0] + ":" + error.split(":", 2)[1]
        errors_by_name[name] = errors_by_name.get(name, 0) + 1

    def row(name: str, values: list[float], errors: int) -> list:
        return [
            name,
            len(values),
            errors,
            f"{len(values) / seconds:.1f}",
            *(f"{percentile(values, p):.0f}" for p in (50, 95, 99)),
        ]

    headers = ["endpoint", "requests", "errors", "req/s", "p50 ms", "p95 ms", "p99 ms"]
    print_table(headers, [row(n, v, errors_by_name.get(n, 0)) for n, v in sorted(samples.items())])
    print()
    classes: dict[str, list[float]] = {}
    class_errors: dict[str, int] = {}
    for name, values in samples.items():
        kind = name.split(":", 1)[0]
        classes.setdefault(kind, []).extend(values)
        class_errors[kind] = class_errors.get(kind, 0) + errors_by_name.get(name, 0)
    everything = [v for values in samples.values() for v in values]
    print_table(
        ["class", *headers[1:]],
        [row(k, v, class_errors[k]) for k, v in sorted(classes.items())]
        + [row("all", everything, len(out["errors"]))],
    )
    for error in out["errors"][:10]:
        print(f"  error: {error}")
    p95 = {kind: percentile(classes.get(kind, []), 95) for kind in GOAL_CLASSES}
    met = all(value < GOAL_P95_MS for value in p95.values()) and not out["errors"]
    shown = ", ".join(f"{kind} {value:.0f} ms" for kind, value in p95.items())
    print(
        f"\ngoal: p95 < {GOAL_P95_MS:.0f} ms for pages and API, zero errors: "
        f"{'PASS' if met else 'FAIL'} (p95 {shown}; {len(out['errors'])} errors)"
    )
    return met


def report_plans(found: list[tuple[str, int, float, list[str]]], at_scale: bool) -> bool:
    print(
        "\nQuery plans of the hot lists (EXPLAIN of every query each ran on allocations, instances, "
        "audit, and projects but for a count):"
    )
    clean = True
    for what, status, elapsed_ms, scans in found:
        verdict = "no sequential scan" if not scans else f"SEQUENTIAL SCAN: {'; '.join(scans)}"
        print(f"  {what}: {status} in {elapsed_ms:.0f} ms, {verdict}")
        clean = clean and not scans and status == 200
    if at_scale:
        verdict = "PASS" if clean else "FAIL"
        print(f"plans: no sequential scan on allocations, instances, audit or projects: {verdict}")
    else:
        print("plans: not judged at the quick seed's size (the planner rightly scans small tables)")
    return clean or not at_scale


# --- main ----------------------------------------------------------------------


def main() -> int:
    args = parse_args()
    if shutil.which("nginx") is None:
        sys.exit("nginx is not installed (make nginx)")
    state = Path(args.state or (ROOT / "var" / ("load-quick" if args.quick else "load"))).resolve()
    port, web_ports, upstream_port = (
        free_port(),
        [free_port() for _ in range(args.web_processes)],
        free_port(),
    )
    issuer = FakeIssuer()
    os.environ.update(
        {
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{args.db_name}",
            "REDIS_URL": args.redis_url,
            "GPUAAS_BROKER_URL": "",
            "GPUAAS_TRUSTED_ISSUERS": json.dumps([issuer.config]),
            "GPUAAS_WORKER_CONCURRENCY": args.worker_concurrency,
            "GPUAAS_SIMULATED_STEP_SECONDS": args.step_seconds,
            # The per-principal limit (1200/min) would answer 429 to a CCP client that polls
            # for two minutes; the throttle still runs on every request.
            "GPUAAS_API_RATE_LIMIT": "100000000/min",
        }
    )
    from gpuaas import prodlocal

    env = prodlocal.environment(state, port)
    os.environ.update(env)
    import django

    django.setup()
    # The seed's audit lines, the plan check's refusals; the topology's processes log as configured.
    logging.disable(logging.WARNING)
    from django.core.management import call_command

    if args.reseed:
        from harness import drop_database

        drop_database(args.db_name)
    prodlocal.create_database(env["DATABASE_URL"])
    call_command("migrate", verbosity=0, interactive=False)
    started = time.perf_counter()
    if seeded(args.sizes):
        print(f"# seed: already in {args.db_name}, kept")
    else:
        from django.db import connection

        from apps.tenancy.models import Tenant

        if Tenant.objects.exists():  # a seed cut short, or of another size
            connection.close()
            from harness import recreate_database

            recreate_database(args.db_name)
            call_command("migrate", verbosity=0, interactive=False)
        seed(args.sizes, upstream_port)
        print(f"# seed: {args.db_name} written in {time.perf_counter() - started:.0f} s")
    from django.db import connection

    if args.seed_only:
        print(f"# seed: {describe_seed()}")
        return 0
    connection.close()  # the topology's processes take over the database's connections

    from proxy import STATIC_UPSTREAM, page, start_nginx

    with tempfile.TemporaryDirectory(prefix="gpuaas-load-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # nginx's workers (nobody, under root) read the page below it
        (work / "upstream" / "html").mkdir(parents=True)
        (work / "upstream" / "html" / "page.html").write_text(page())
        upstream = start_nginx("upstream", work, STATIC_UPSTREAM, port=upstream_port)
        topology = Background(prodlocal.command(state, port, web_ports), {}, work / "prod-local.log")
        try:
            # The web processes before nginx: a probe through nginx while one is still starting
            # would mark it failed, and nginx would send it nothing for fail_timeout (10 s).
            wait_ready([f"http://127.0.0.1:{p}" for p in (*web_ports, port)], topology)
            data = plan(args, issuer, port, upstream_port)
            connection.close()
            print(f"# {machine()}")
            print(f"# load average before: {load_average()} (other work on the machine skews every figure)")
            print(f"# settings: {settings_line(args, env)}")
            print(f"# seed: {describe_seed()}")
            connection.close()
            before = cpu_seconds(topology.process.pid, args.db_name)
            out = run_locust(args, data, f"http://127.0.0.1:{port}", work)
            used = {k: v - before[k] for k, v in cpu_seconds(topology.process.pid, args.db_name).items()}
            print(f"# load average after: {load_average()}")
            print()
            met = report(out)
            report_cpu(used, out)
            found = explain_hot_lists()
            plans_ok = report_plans(found, at_scale=not args.quick)
        except BaseException:
            log = work / "prod-local.log"
            if log.exists():
                print(log.read_text()[-3000:], file=sys.stderr)
            for name in ("web1", "web2", "worker", "nginx"):
                path = state / "logs" / f"{name}.log"
                if path.exists():
                    print(f"--- {name}\n{path.read_text()[-2000:]}", file=sys.stderr)
            raise
        finally:
            topology.stop(timeout=60)
            upstream.stop()
            issuer.close()
            if args.drop:
                from harness import drop_database

                connection.close()
                drop_database(args.db_name)
    print(f"\nmet the goal: {'yes' if met else 'no'}")
    return 0 if not out["errors"] and plans_ok else 1


def describe_seed() -> str:
    from apps.allocations.models import Allocation, Node
    from apps.core.models import AuditEvent
    from apps.runtime.models import AppInstance
    from apps.tenancy.models import Membership, Project, Tenant

    counts = {
        "nodes": Node.objects.count(),
        "tenants": Tenant.objects.count(),
        "projects": Project.objects.count(),
        "memberships": Membership.objects.count(),
        "allocations": Allocation.objects.count(),
        "app instances": AppInstance.objects.count(),
        "audit rows": AuditEvent.objects.count(),
    }
    return ", ".join(f"{n:,} {what}" for what, n in counts.items())


if __name__ == "__main__":
    sys.exit(main())
