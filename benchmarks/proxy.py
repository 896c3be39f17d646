"""The platform proxy against direct access and against a peer proxy, in one run.

Sets up its own PostgreSQL database, launches two JupyterLab instances through the
real runtime (this script plays their node agent) whose routes point at local
upstreams: nginx serving one 1,420-byte page for every path, and a WebSocket echo
server. It serves the portal in production mode (``manage.py serve``: uvicorn,
Redis, debug off), whose ASGI proxy serves ``/w/{instance}/web/...``, gets a route
cookie the way a browser does (ticket -> ``POST /_gpuaas/session``), and prints:

1. requests per second and p50/p99 latency with wrk (32 connections, 10 s each)
   against the upstream directly, through the ASGI proxy, through the nginx data
   plane, through plain nginx ``proxy_pass`` (a reference: nginx's own proxy cost,
   no authentication) and through JupyterHub's configurable-http-proxy (the
   peer), with the CPU each proxy used and its requests per CPU-second;
2. WebSocket echo messages per second (32 sockets, one message in flight each)
   directly and through each proxy;
3. the resident memory of each proxy before and after opening 1,000 WebSockets
   through it, and after holding them for a minute.

Goals (printed as PASS/FAIL, never asserted): the nginx data plane serves at least
70 % of the requests per second of plain nginx proxying and adds at most 1 ms to p99
on the JupyterLab route's page (issue 16, decision 0036; the medians of alternating
rounds of the two after the table, the p99 at a paced rate below saturation with the
grant kept, decisions 0069 and 0072; what the first request after a grant lapsed
adds is printed beside it); the ASGI proxy serves at least as many requests per
CPU-second as configurable-http-proxy (the median of alternating rounds of the two);
a proxy's memory stays flat while the WebSockets are held.

``--instructions`` prints, instead of timings, the instructions one nginx worker
spends per request on the data plane and on plain ``proxy_pass``, counted by
callgrind: a figure that does not move with the machine's load, for comparing
changes to docker/nginx.conf and its Lua.

    .venv/bin/python benchmarks/proxy.py                 # about 11 minutes
    .venv/bin/python benchmarks/proxy.py --quick         # CI smoke: 2 s per target, 10 s hold
    .venv/bin/python benchmarks/proxy.py --instructions  # about a minute, needs valgrind
    .venv/bin/python benchmarks/proxy.py --goal-only     # the nginx goal's rounds alone
    .venv/bin/python benchmarks/proxy.py --asgi-only     # the ASGI goal's rounds alone

Needs PostgreSQL and Redis (``make services``), Debian's ``nginx`` with its Lua
module (``make nginx``), ``wrk`` (``apt-get install wrk``) and configurable-http-proxy
(``cd benchmarks/peers && npm ci``). Everything shares one machine with the load
generators: compare figures only within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    ROOT,
    Background,
    Server,
    benchmark_parser,
    configure_environment,
    drop_database,
    free_port,
    group_cpu_seconds,
    group_rss_bytes,
    load_average,
    machine,
    percentile,
    print_table,
    recreate_database,
    seed_jupyterlab_allocation,
    verdict,
)

from tests.support.issuer import FakeIssuer

PEERS = ROOT / "benchmarks" / "peers"
CHP = PEERS / "node_modules" / ".bin" / "configurable-http-proxy"
CHP_TOKEN = "bench"  # its REST API listens on loopback only
PAGE_BYTES = 1420  # the DESIGN.md field note's upstream page
ECHO_BYTES = 128
DATA_PLANE_GOAL = 0.70
P99_ADDED_GOAL_MS = 1.0  # over plain proxy_pass's p99, on the JupyterLab route's page
# The p99 rounds are paced below saturation (decision 0069): at wrk's full speed on two
# shared cores p99 is the run queue's, not the proxy's. Each connection waits its share
# of the interval after every answer, so the rate is this less a little per answer's time.
PACED_RATE = 1000  # requests per second
PACED_CONNECTIONS = 64  # each waits 64 ms: the time of an answer moves the rate little
PACING_SCRIPT = ROOT / "benchmarks" / "wrk-paced.lua"
PACED_WARMUP_SECONDS = 1
GRANT_LAPSE_SECONDS = 3.2  # the portal's max-age and stale-while-revalidate, and a little
MEMORY_GROWTH_GOAL = 0.05  # "flat": at most 5 % above the RSS right after opening
# Load generators and the echo server run in processes of their own (their CPU must
# not look like this script's), started fresh: a fork would carry Django's open
# database connections and this process's threads along.
SPAWN = multiprocessing.get_context("spawn")


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(
        __doc__, quick="CI smoke run: 2 s per target, 10 s hold", db_name="gpuaas_bench_proxy"
    )
    # wrk takes whole seconds.
    parser.add_argument("--duration", type=int, help="seconds of measured load per target (10; quick: 2)")
    parser.add_argument("--warmup", type=int, help="seconds of unmeasured load first (2; quick: 1)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections and echo sockets (32)")
    parser.add_argument(
        "--share-rounds", type=int, help="alternating rounds of plain proxy_pass and data plane (7; quick: 2)"
    )
    parser.add_argument("--share-seconds", type=int, help="seconds of each round (4; quick: 1)")
    parser.add_argument("--websockets", type=int, default=1000, help="WebSockets held per proxy (1000)")
    parser.add_argument("--hold", type=float, help="seconds the WebSockets are held (60; quick: 10)")
    parser.add_argument("--asgi-workers", type=int, default=1, help="uvicorn processes of the ASGI proxy (1)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="instead: nginx's instructions per request, counted by callgrind (valgrind; about a minute)",
    )
    parser.add_argument(
        "--goal-only",
        action="store_true",
        help="instead: only the nginx goal's alternating rounds (about a minute)",
    )
    parser.add_argument(
        "--asgi-only",
        action="store_true",
        help="instead: only the ASGI goal's alternating rounds with configurable-http-proxy (about a minute)",
    )
    args = parser.parse_args()
    args.duration = args.duration or (2 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.hold = args.hold or (10.0 if args.quick else 60.0)
    args.share_rounds = args.share_rounds or (2 if args.quick else 7)
    args.share_seconds = args.share_seconds or (1 if args.quick else 4)
    return args


# --- upstreams and proxies ---------------------------------------------------------

NGINX_COMMON = """
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    keepalive_requests 1000000;
{http}
}}
"""

# One page for every path: the proxied paths (/w/{instance}/web/...) reach it unchanged.
STATIC_UPSTREAM = """
    sendfile on;
    tcp_nopush on;
    default_type text/html;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/html;
        location / {{ try_files /page.html =404; }}
    }}
"""

# nginx's own reverse-proxy cost: no authentication, keep-alive to the upstream,
# WebSocket upgrades passed through (what the DESIGN.md field note measured).
PLAIN_PROXY = """
    map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
    upstream app {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    upstream echo {{ server 127.0.0.1:{echo}; }}
    proxy_http_version 1.1;
    proxy_set_header Connection $connection_upgrade;
    proxy_set_header Upgrade $http_upgrade;
    proxy_read_timeout 1h;
    server {{
        listen 127.0.0.1:{port};
        location {static_prefix} {{ proxy_pass http://app; }}
        location {echo_prefix} {{ proxy_pass http://echo; }}
    }}
"""


def start_nginx(name: str, var_dir: Path, http: str, **values) -> Background:
    directory = var_dir / name
    (directory / "tmp").mkdir(parents=True)
    # nginx's workers run as nobody when started as root: they must read the files.
    directory.chmod(0o755)
    conf = directory / "nginx.conf"
    conf.write_text(NGINX_COMMON.format(dir=directory, http=http.format(dir=directory, **values)))
    process = Background(
        ["nginx", "-p", str(directory), "-c", str(conf), "-g", "daemon off;"], {}, directory / "stdout.log"
    )
    wait_listening(values["port"], process, name)
    return process


def wait_listening(port: int, process: Background | None, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None:
            process.check_alive(what)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} not listening on {port} after {timeout:.0f} s")


def start_chp(var_dir: Path, port: int, routes: dict[str, int]) -> Background:
    """configurable-http-proxy as JupyterHub runs it: a route per server added through
    its REST API (``routes``: path prefix -> upstream port), the prefix kept in the
    upstream path, nothing else answered."""
    api_port = free_port()
    process = Background(
        [
            str(CHP),
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--api-ip",
            "127.0.0.1",
            "--api-port",
            str(api_port),
            "--log-level",
            "warn",
        ],
        {"CONFIGPROXY_AUTH_TOKEN": CHP_TOKEN},
        var_dir / f"chp-{port}.log",
    )
    wait_listening(api_port, process, "configurable-http-proxy")
    wait_listening(port, process, "configurable-http-proxy")
    for prefix, upstream in routes.items():
        httpx.post(
            f"http://127.0.0.1:{api_port}/api/routes{prefix.rstrip('/')}",
            json={"target": f"http://127.0.0.1:{upstream}"},
            headers={"Authorization": f"token {CHP_TOKEN}"},
        ).raise_for_status()
    return process


def start_dataplane(var_dir: Path, port: int, portal_port: int, env: dict[str, str]) -> Background:
    """docker/nginx.conf, the production template, filled in as the nginx image does."""
    from tests.support.nginx import CONF_DIR, render

    directory = Path(tempfile.mkdtemp(prefix="dataplane-", dir=var_dir))
    conf = directory / "nginx.conf"
    conf.write_text(
        render(
            {
                "GPUAAS_NGINX_LISTEN": f"127.0.0.1:{port}",
                "GPUAAS_NGINX_STATE_DIR": str(directory),
                "GPUAAS_NGINX_CONF_DIR": str(CONF_DIR),
                "GPUAAS_PORTAL_UPSTREAM": f"127.0.0.1:{portal_port}",
                "GPUAAS_PROXY_AUTH_SECRET": env["GPUAAS_PROXY_AUTH_SECRET"],
                "GPUAAS_APPS_DOMAIN": "",
                "GPUAAS_ISSUER": env["GPUAAS_ISSUER"],
            }
        )
    )
    process = Background(
        ["nginx", "-p", str(directory), "-c", str(conf), "-e", "stderr", "-g", "daemon off;"],
        {},
        directory / "output.log",
    )
    wait_listening(port, process, "nginx data plane")
    return process


def echo_upstream(port: int) -> None:
    """A WebSocket server that sends every message back, on any path (its own process)."""
    from websockets.asyncio.server import serve

    async def echo(websocket):
        async for message in websocket:
            await websocket.send(message)

    async def run():
        async with serve(echo, "127.0.0.1", port, compression=None, max_size=None) as server:
            await server.serve_forever()

    asyncio.run(run())


def start_echo_upstream(port: int) -> multiprocessing.Process:
    process = SPAWN.Process(target=echo_upstream, args=(port,), name="echo-upstream", daemon=True)
    process.start()
    wait_listening(port, None, "echo upstream")
    return process


# --- the world ----------------------------------------------------------------------


def clear_connection_counts(redis_url: str) -> None:
    """Connection counts an interrupted run left in Redis: the next run's user has the
    same id, and would start with its connections counted against its limit."""
    import redis

    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter("gpuaas:proxy:conn:*"):
        client.delete(key)
    client.close()


def seed(static_port: int, echo_port: int) -> dict:
    """A project admin with two running JupyterLab instances on one node: one whose
    route points at the static nginx, one at the echo server. JupyterLab's adapter
    is the demanding one: a bridged token added upstream and blanked from text
    responses, WebSockets."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from apps.proxy import sessions
    from apps.runtime import agents
    from apps.runtime import services as runtime
    from apps.tenancy.models import Membership
    from apps.tenancy.principal import for_user

    # credential_hash, agent_address: an agent enrolled from this machine, which this script plays.
    seeded = seed_jupyterlab_allocation(
        flavor_name="h100-8x",
        gpus=8,
        cpu_cores=64,
        memory_gb=1024,
        credential_hash="0" * 64,
        agent_address="127.0.0.1",
    )
    tenant, project, node, allocation = (seeded[k] for k in ("tenant", "project", "node", "allocation"))
    user = get_user_model().objects.create_user("bench", password=None)
    Membership.objects.create(user=user, tenant=tenant, project=project, role="project_admin")
    principal = for_user(user)
    # The platform session the route cookies hang on, as the portal's login makes it.
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()

    tickets = {}
    for name, port in (("static", static_port), ("echo", echo_port)):
        instance = runtime.launch(
            principal, project, app_slug="jupyterlab", allocation_id=allocation.pk
        ).instance
        for task in agents.claim_tasks(node):
            agents.report_task(
                node, task.pk, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": port}]
            )
        instance.refresh_from_db()
        if instance.state != "running":
            raise RuntimeError(f"instance {name} is {instance.state}, not running")
        tickets[name] = sessions.mint(principal, instance, "web", session)
    return tickets


def route_cookie(origin: str, ticket: dict) -> str:
    """Exchange a ticket for the route cookie on the route's origin, as the launcher's browser does."""
    response = httpx.post(origin + "/_gpuaas/session", data={"ticket": ticket["ticket"]}, timeout=10)
    cookie = response.cookies.get("_gpuaas_route")
    if response.status_code >= 400 or not cookie:
        raise RuntimeError(f"ticket exchange answered {response.status_code}: {response.text[:300]}")
    return cookie


@dataclass
class Target:
    """One way to the upstreams: the page's URL and the echo server's, the headers a
    browser would send to each, and the processes that make up the proxy (none
    for direct access)."""

    name: str
    http_url: str
    ws_url: str
    http_headers: dict[str, str] = field(default_factory=dict)
    ws_headers: dict[str, str] = field(default_factory=dict)
    processes: list[Background] = field(default_factory=list)

    def cpu_seconds(self) -> list[float]:
        return [group_cpu_seconds(p.pgid) for p in self.processes]

    def rss_bytes(self) -> int:
        """Every process of the proxy: the nginx data plane's WebSockets are held by
        nginx and by the portal behind it, which relays them (decision 0021)."""
        return sum(group_rss_bytes(p.pgid) for p in self.processes)


# --- load ---------------------------------------------------------------------------

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass
class HttpResult:
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_split: list[float]  # CPU-seconds per second of each of the proxy's processes

    @property
    def cpu_cores(self) -> float:
        return sum(self.cpu_split)


def check_page(target: Target) -> None:
    """One request first: wrk counts a redirect or a login page as a success."""
    response = httpx.get(target.http_url, headers=target.http_headers, timeout=10)
    if response.status_code != 200 or len(response.content) != PAGE_BYTES:
        raise RuntimeError(
            f"{target.name}: {response.status_code}, {len(response.content)} bytes, not the page: "
            f"{response.text[:300]}"
        )


def wrk(target: Target, seconds: float, connections: int, rate: int | None = None) -> HttpResult:
    """wrk at full speed, or paced to about ``rate`` requests per second in all: each
    connection waits ``connections / rate`` after every answer (wrk's Lua ``delay``)."""
    # One wrk thread: it leaves the other core to the servers, and on two cores a
    # second thread only competes with them (fewer requests/s direct, not more).
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "5s"]
    paced = ["--", str(connections * 1000 // rate)] if rate else []
    if rate:
        command += ["-s", str(PACING_SCRIPT)]
    for name, value in target.http_headers.items():
        command += ["-H", f"{name}: {value}"]
    cpu_before = target.cpu_seconds()
    started = time.monotonic()
    output = subprocess.run(
        [*command, target.http_url, *paced], check=True, capture_output=True, text=True
    ).stdout
    elapsed = time.monotonic() - started
    cpu_after = target.cpu_seconds()
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors += int(non_2xx.group(1)) if non_2xx else 0

    def latency(label: str) -> float:
        found = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s|m)$", output, re.M)
        if found is None:
            raise RuntimeError(f"{target.name}: no {label}th percentile in wrk's output:\n{output}")
        value, unit = found.groups()
        return float(value) * _UNITS[unit]

    return HttpResult(
        requests=requests,
        errors=errors,
        rps=float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        p50_ms=latency("50"),
        p99_ms=latency("99"),
        cpu_split=[(after - before) / elapsed for before, after in zip(cpu_before, cpu_after, strict=True)],
    )


def echo_load(url: str, headers: dict, sockets: int, seconds: float) -> dict:
    """``sockets`` WebSockets each sending a message and waiting for its echo, for
    ``seconds`` once all are open (runs in its own process: the client's CPU must
    not be the proxy's)."""
    from websockets.asyncio.client import connect

    async def run() -> dict:
        payload = "x" * ECHO_BYTES
        connections = await asyncio.gather(
            *(
                connect(url, additional_headers=headers, compression=None, open_timeout=20)
                for _ in range(sockets)
            )
        )
        latencies: list[float] = []
        errors = 0
        deadline = time.monotonic() + seconds

        async def ping_pong(websocket) -> None:
            nonlocal errors
            while time.monotonic() < deadline:
                sent = time.perf_counter()
                await websocket.send(payload)
                if await websocket.recv() != payload:
                    errors += 1
                latencies.append((time.perf_counter() - sent) * 1000)

        started = time.monotonic()
        await asyncio.gather(*(ping_pong(ws) for ws in connections))
        elapsed = time.monotonic() - started
        await asyncio.gather(*(ws.close() for ws in connections))
        return {
            "messages": len(latencies),
            "errors": errors,
            "per_second": len(latencies) / elapsed,
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
        }

    return asyncio.run(run())


def hold_websockets(url: str, headers: dict, count: int, control) -> None:
    """Open ``count`` WebSockets, report how many opened, hold them until told, then
    report how many still echo (its own process, driven over ``control``)."""
    from websockets.asyncio.client import connect

    async def run() -> None:
        gate = asyncio.Semaphore(50)  # a ramp, not a thundering herd of handshakes

        async def open_one():
            async with gate:
                try:
                    return await connect(url, additional_headers=headers, compression=None, open_timeout=30)
                except Exception:  # noqa: BLE001 - any failure is a socket that did not open
                    return None

        opened = [ws for ws in await asyncio.gather(*(open_one() for _ in range(count))) if ws is not None]
        control.send(len(opened))
        await asyncio.get_running_loop().run_in_executor(None, control.recv)

        async def echoes(websocket) -> bool:
            try:
                await websocket.send("still there?")
                return await asyncio.wait_for(websocket.recv(), 10) == "still there?"
            except Exception:  # noqa: BLE001 - a socket that fails here did not survive the hold
                return False

        alive = sum(await asyncio.gather(*(echoes(ws) for ws in opened)))
        await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)
        control.send(alive)

    asyncio.run(run())


@dataclass
class Memory:
    before: int
    opened: int
    after_open: int
    end_of_hold: int
    alive: int
    peak: int  # the highest of the samples taken every 5 s of the hold

    @property
    def per_socket_kb(self) -> float:
        return (self.after_open - self.before) / 1024 / self.opened if self.opened else float("nan")

    @property
    def growth(self) -> float:
        return self.end_of_hold / self.after_open - 1


def held_memory(target: Target, count: int, hold: float) -> Memory:
    """RSS of a freshly started proxy: idle, with ``count`` WebSockets just opened,
    every few seconds while they are held, at the end of the hold."""
    ours, theirs = SPAWN.Pipe()
    client = SPAWN.Process(
        target=hold_websockets,
        args=(target.ws_url, target.ws_headers, count, theirs),
        name="hold",
        daemon=True,
    )
    before = target.rss_bytes()
    client.start()
    try:
        if not ours.poll(300):
            raise RuntimeError(f"{target.name}: opening {count} WebSockets took over 300 s")
        opened = ours.recv()
        after_open = target.rss_bytes()
        samples = []
        deadline = time.monotonic() + hold
        while time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            samples.append(target.rss_bytes())
        end_of_hold = samples[-1]
        ours.send("check")
        if not ours.poll(120):
            raise RuntimeError(f"{target.name}: the held WebSockets did not answer within 120 s")
        alive = ours.recv()
    finally:
        client.join(30)
        if client.is_alive():
            client.kill()
    return Memory(before, opened, after_open, end_of_hold, alive, max(samples))


# --- the three parts ----------------------------------------------------------------


def measure_http(targets: dict[str, Target], args) -> dict[str, HttpResult]:
    print()
    print(
        f"HTTP: GET of a {PAGE_BYTES:,}-byte page served by nginx, wrk with {args.connections} connections, "
        f"{args.duration} s per target after {args.warmup} s of warm-up:"
    )
    print()
    results = {}
    for key, target in targets.items():
        check_page(target)
        if args.warmup:
            wrk(target, args.warmup, args.connections)
        results[key] = wrk(target, args.duration, args.connections)
    rows = []
    for key, target in targets.items():
        r = results[key]
        proxied = bool(target.processes)
        rows.append(
            [
                target.name,
                r.requests,
                r.errors,
                f"{r.rps:,.0f}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                f"{r.cpu_cores:.2f}" if proxied else "-",
                f"{r.rps / r.cpu_cores:,.0f}" if proxied and r.cpu_cores else "-",
            ]
        )
    print_table(
        [
            "target",
            "requests",
            "errors",
            "req/s",
            "p50 ms",
            "p99 ms",
            "proxy CPU cores",
            "req/s per proxy core",
        ],
        rows,
    )
    nginx, portal = results["dataplane"].cpu_split
    print(
        f"nginx data plane CPU: nginx {nginx:.2f} cores, the portal answering its auth requests {portal:.2f}"
    )
    return results


@dataclass
class Rounds:
    shares: list[float]  # the data plane's req/s over plain proxy_pass's, per round (saturated)
    added_p99_ms: list[float]  # the data plane's p99 less plain proxy_pass's, per round (paced)
    paced_rps: list[float]  # the rate the paced rounds reached, the data plane's and plain's


def measure_share(targets: dict[str, Target], args) -> Rounds:
    """The data plane's requests per second as a share of plain proxy_pass's, and the
    p99 it adds, in alternating rounds of each: plain proxy_pass's figures swing by up
    to a quarter from one run of wrk to the next on these machines, the data plane's
    much less, so one run of each decides nothing. The share is measured at full
    speed; the p99 at a paced rate below saturation (``PACED_RATE``, decision 0069)."""
    rounds = Rounds([], [], [])

    def paced(target: Target) -> HttpResult:
        # A second unmeasured first, as for a user whose grant is kept: the first
        # requests after a lapse wait for the portal once (measure_lapsed_grant).
        wrk(target, PACED_WARMUP_SECONDS, PACED_CONNECTIONS, PACED_RATE)
        return wrk(target, args.share_seconds, PACED_CONNECTIONS, PACED_RATE)

    for _ in range(args.share_rounds):
        plain = wrk(targets["plain"], args.share_seconds, args.connections)
        plane = wrk(targets["dataplane"], args.share_seconds, args.connections)
        rounds.shares.append(plane.rps / plain.rps)
        plain, plane = paced(targets["plain"]), paced(targets["dataplane"])
        rounds.added_p99_ms.append(plane.p99_ms - plain.p99_ms)
        rounds.paced_rps += [plane.rps, plain.rps]
    print()
    print(
        f"nginx data plane / plain proxy_pass, {args.share_rounds} alternating rounds of "
        f"{args.share_seconds} s each: {', '.join(f'{share:.0%}' for share in rounds.shares)}; "
        f"p99 added at about {PACED_RATE:,} req/s ({PACED_CONNECTIONS} connections, reached "
        f"{min(rounds.paced_rps):,.0f}-{max(rounds.paced_rps):,.0f}) (ms): "
        f"{', '.join(f'{added:+.2f}' for added in rounds.added_p99_ms)}"
    )
    return rounds


def measure_lapsed_grant(targets: dict[str, Target], samples: int = 5) -> float:
    """What the first request after a grant lapsed (3 s without a request) adds over
    plain proxy_pass: the data plane asks the portal, and a page's other requests
    wait for that answer (gpuaas.lua). The median of ``samples``, in ms."""
    added = []
    with httpx.Client(trust_env=False, timeout=10) as client:
        for _ in range(samples):
            timings = {}
            for key in ("plain", "dataplane"):
                target = targets[key]
                time.sleep(GRANT_LAPSE_SECONDS)
                started = time.perf_counter()
                client.get(target.http_url, headers=target.http_headers).raise_for_status()
                timings[key] = (time.perf_counter() - started) * 1000
            added.append(timings["dataplane"] - timings["plain"])
    print(
        f"first request after a grant lapsed: {', '.join(f'{ms:+.2f}' for ms in added)} ms over "
        "plain proxy_pass (the data plane asks the portal once, and the page's other requests wait for it)"
    )
    return statistics.median(added)


def measure_asgi_share(targets: dict[str, Target], args) -> list[float]:
    """The ASGI proxy's requests per CPU-second over configurable-http-proxy's, in
    alternating rounds of each (for a change to the ASGI proxy: about a minute)."""
    ratios = []
    for _ in range(args.share_rounds):
        asgi = wrk(targets["asgi"], args.share_seconds, args.connections)
        chp = wrk(targets["chp"], args.share_seconds, args.connections)
        ratios.append((asgi.rps / asgi.cpu_cores) / (chp.rps / chp.cpu_cores))
        print(
            f"ASGI proxy {asgi.rps:,.0f} req/s on {asgi.cpu_cores:.2f} cores, p99 {asgi.p99_ms:.2f} ms; "
            f"configurable-http-proxy {chp.rps:,.0f} req/s on {chp.cpu_cores:.2f} cores, "
            f"p99 {chp.p99_ms:.2f} ms: {ratios[-1]:.2f}x per core"
        )
    return ratios


def echo_through(pool, target: Target, connections: int, duration: float) -> dict:
    """``echo_load`` in the client process, its failure named after the target."""
    try:
        return pool.apply(echo_load, (target.ws_url, target.ws_headers, connections, duration))
    except Exception as exc:
        raise RuntimeError(f"{target.name}: WebSocket echo failed: {exc!r}") from exc


def measure_websockets(targets: dict[str, Target], args) -> dict[str, dict]:
    print()
    print(
        f"WebSocket echo: {args.connections} sockets, one {ECHO_BYTES}-byte message in flight on each, "
        f"{args.duration} s per target (Python websockets client and echo server):"
    )
    print()
    results = {}
    # One client process for every target: it must not share the proxy's process.
    with SPAWN.Pool(1) as pool:
        for key, target in targets.items():
            results[key] = echo_through(pool, target, args.connections, args.duration)
    print_table(
        ["target", "messages", "errors", "messages/s", "p50 ms", "p99 ms"],
        [
            [
                targets[key].name,
                r["messages"],
                r["errors"],
                f"{r['per_second']:,.0f}",
                f"{r['p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
            ]
            for key, r in results.items()
        ],
    )
    return results


def measure_memory(targets: dict[str, Target], args, restart) -> dict[str, Memory]:
    print()
    print(
        f"Memory: {args.websockets:,} WebSockets opened through a freshly started proxy (50 handshakes at a "
        f"time) and held {args.hold:g} s; resident memory of the proxy's processes:"
    )
    print()
    results = {}
    with SPAWN.Pool(1) as pool:
        for key, target in targets.items():
            restart(key)
            # A first exchange loads what a WebSocket needs: "idle" is a warm process.
            echo_through(pool, target, 1, 1)
            results[key] = held_memory(target, args.websockets, args.hold)
    mb = 1024 * 1024
    print_table(
        [
            "proxy",
            "opened",
            "idle MB",
            "after opening MB",
            "KB per WebSocket",
            "peak in hold MB",
            "end of hold MB",
            "growth in hold",
            "still echoing",
        ],
        [
            [
                targets[key].name,
                m.opened,
                f"{m.before / mb:.1f}",
                f"{m.after_open / mb:.1f}",
                f"{m.per_socket_kb:.1f}",
                f"{m.peak / mb:.1f}",
                f"{m.end_of_hold / mb:.1f}",
                f"{m.growth:+.1%}",
                m.alive,
            ]
            for key, m in results.items()
        ],
    )
    return results


INSTRUCTION_RUNS = (1000, 6000)


def instructions_per_request(target: Target) -> float:
    """User-space instructions one nginx worker spends on a request of ``target``,
    counted by callgrind: the same figure however busy the machine is (kernel time is
    not in it). The target's nginx is stopped and started again as one process under
    valgrind, for two runs of requests over one kept-alive connection; their
    difference is per request, without start-up and shutdown."""
    nginx = target.processes[0]
    command = list(nginx.process.args)
    conf = Path(command[command.index("-c") + 1])
    single = conf.with_name("single-process.conf")
    single.write_text(re.sub(r"^worker_processes .*$", "worker_processes 1;", conf.read_text(), flags=re.M))
    command[command.index("-c") + 1] = str(single)
    command[command.index("-g") + 1] = "daemon off; master_process off;"
    port = urlsplit(target.http_url).port
    nginx.stop()
    counts = []
    for requests in INSTRUCTION_RUNS:
        out = conf.with_name(f"callgrind.{requests}")
        # --smc-check: LuaJIT writes the machine code it runs.
        valgrind = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file", f"--callgrind-out-file={out}"]
        process = Background(valgrind + command, {}, conf.with_name(f"callgrind.{requests}.log"))
        wait_listening(port, process, f"{target.name} under callgrind", timeout=120)
        with httpx.Client(headers=target.http_headers, timeout=60) as client:
            for _ in range(requests):
                client.get(target.http_url).raise_for_status()
        # nginx exits on SIGTERM and callgrind writes its count; under valgrind a signal
        # that comes while nginx waits for events can go unnoticed: it is repeated.
        deadline = time.monotonic() + 120
        while process.process.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target.name} under callgrind did not exit; see {process.log_path}")
            os.killpg(process.pgid, signal.SIGTERM)
            time.sleep(1)
        process.stop()
        counts.append(int(re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M).group(1)))
    return (counts[1] - counts[0]) / (INSTRUCTION_RUNS[1] - INSTRUCTION_RUNS[0])


def measure_instructions(targets: dict[str, Target]) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    print()
    print(
        f"User-space instructions per request of one nginx worker (callgrind, {INSTRUCTION_RUNS[0]:,} then "
        f"{INSTRUCTION_RUNS[1]:,} kept-alive GETs of the page, one process):"
    )
    print()
    counted = {key: instructions_per_request(target) for key, target in targets.items()}
    print_table(
        ["target", "instructions per request"],
        [[targets[key].name, f"{count:,.0f}"] for key, count in counted.items()],
    )
    print(f"the data plane: {counted['dataplane'] / counted['plain']:.2f}x plain proxy_pass's instructions")


def goals(
    http: dict[str, HttpResult],
    rounds: Rounds,
    lapsed_ms: float,
    asgi_ratios: list[float],
    memory: dict[str, Memory],
) -> None:
    print()
    # Against nginx's own proxying in this run (decisions 0020, 0036); the share of direct beside it.
    plane, plain, direct = (http[k].rps for k in ("dataplane", "plain", "direct"))
    share, added = statistics.median(rounds.shares), statistics.median(rounds.added_p99_ms)
    print(
        f"goal: nginx data plane >= {DATA_PLANE_GOAL:.0%} of nginx proxying directly (plain proxy_pass) "
        f"req/s: {share:.0%} (median, {len(rounds.shares)} alternating rounds): "
        f"{verdict(share >= DATA_PLANE_GOAL)}"
    )
    print(
        f"      (of direct access to the upstream: data plane {plane / direct:.0%}, "
        f"plain proxy_pass {plain / direct:.0%})"
    )
    print(
        f"goal: nginx data plane adds <= {P99_ADDED_GOAL_MS:g} ms to plain proxy_pass's p99 on the "
        f"JupyterLab route's page: {added:+.2f} ms (median of the same rounds, paced at about "
        f"{PACED_RATE:,} req/s, the grant kept): {verdict(added <= P99_ADDED_GOAL_MS)}"
    )
    print(f"      (the first request after a grant lapsed: {lapsed_ms:+.2f} ms, median)")
    ratio = statistics.median(asgi_ratios)
    asgi, chp = (http[k].rps / http[k].cpu_cores for k in ("asgi", "chp"))
    print(
        f"goal: ASGI proxy req/s per core >= configurable-http-proxy's: {ratio:.2f}x (median, "
        f"{len(asgi_ratios)} alternating rounds; the table's one phase: {asgi / chp:.2f}x): "
        f"{verdict(ratio >= 1)}"
    )
    held = memory["asgi"]
    print(
        f"goal: ASGI proxy memory flat under {held.opened:,} held WebSockets (<= {MEMORY_GROWTH_GOAL:+.0%} "
        f"over the hold): {held.growth:+.1%}: {verdict(held.growth <= MEMORY_GROWTH_GOAL)}"
    )


# --- main ---------------------------------------------------------------------------


class Processes:
    """Every server the run starts, stopped in reverse order at the end."""

    def __init__(self):
        self.running: list[Background] = []

    def add(self, process: Background) -> Background:
        self.running.append(process)
        return process

    def restart(self, target: Target, start) -> None:
        """The proxy's front process anew from ``start()``, on the port the old one freed."""
        old = target.processes[0]
        old.stop()
        self.running.remove(old)
        target.processes[0] = self.add(start())

    def stop_all(self) -> None:
        for process in reversed(self.running):
            process.stop()


def main() -> int:
    args = parse_args()
    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install {tool})")
    if not CHP.exists():
        sys.exit(f"configurable-http-proxy is not installed: cd {PEERS.relative_to(ROOT)} && npm ci")
    ports = {name: free_port() for name in ("portal", "edge", "upstream", "echo", "plain", "chp")}
    issuer = FakeIssuer()
    recreate_database(args.db_name)
    clear_connection_counts(args.redis_url)
    processes = Processes()
    echo = None
    try:
        with tempfile.TemporaryDirectory(prefix="gpuaas-bench-proxy-") as tmp:
            var_dir = Path(tmp)
            var_dir.chmod(0o755)  # nginx's workers (nobody, under root) read below it
            # One person opens every held WebSocket: the per-user and per-instance
            # connection limits (64 and 200 by default) would refuse most of them.
            limit = str(args.websockets + args.connections + 100)
            # The nginx data plane is the public edge, as in production: the portal's
            # issuer URL, and with it every route's origin, is nginx's.
            env = configure_environment(
                args,
                issuer,
                ports["edge"],
                tmp,
                GPUAAS_PROXY_MAX_CONNECTIONS_PER_INSTANCE=limit,
                GPUAAS_PROXY_MAX_CONNECTIONS_PER_USER=limit,
                GPUAAS_PROXY_AUTH_SECRET=secrets.token_urlsafe(32),
            )
            Path(tmp, "static").mkdir()
            import django

            django.setup()
            echo = start_echo_upstream(ports["echo"])
            return run(args, env, var_dir, ports, processes)
    finally:
        processes.stop_all()
        if echo is not None:
            echo.kill()
        issuer.close()
        drop_database(args.db_name)


def page() -> str:
    """PAGE_BYTES of HTML with a real page's mix of characters. The data plane scans
    every response for the bridged token, and how far the scan skips at each step
    depends on which of the page's characters the (random) token holds: on a page of
    one repeated character, its cost varied from run to run between 1.2k and 6.4k
    instructions per request."""
    lines = [
        f'<tr id="cell-{n:03d}"><td>In [{n}]:</td><td>print(6*7) # gpu-{n % 8}, Kernel OK: 42</td></tr>\n'
        for n in range(1, 100)
    ]
    return ("<!doctype html>\n<html><body><table>\n" + "".join(lines))[:PAGE_BYTES]


def measure_one_thing(targets: dict[str, Target], args) -> None:
    """``--instructions``, ``--goal-only`` or ``--asgi-only`` in place of the whole run."""
    if args.instructions:
        measure_instructions({key: targets[key] for key in ("dataplane", "plain")})
    elif args.goal_only:
        rounds = measure_share(targets, args)
        lapsed = measure_lapsed_grant(targets)
        print(
            f"median: {statistics.median(rounds.shares):.0%}, "
            f"p99 added at about {PACED_RATE:,} req/s {statistics.median(rounds.added_p99_ms):+.2f} ms; "
            f"the first request after a grant lapsed {lapsed:+.2f} ms"
        )
    else:
        ratios = measure_asgi_share(targets, args)
        print(f"median: {statistics.median(ratios):.2f}x configurable-http-proxy's req/s per core")


def run(args, env: dict[str, str], var_dir: Path, ports: dict[str, int], processes: Processes) -> int:
    html = var_dir / "upstream" / "html"
    html.mkdir(parents=True)
    (html / "page.html").write_text(page())
    processes.add(start_nginx("upstream", var_dir, STATIC_UPSTREAM, port=ports["upstream"]))
    tickets = seed(ports["upstream"], ports["echo"])
    routes = {name: tickets[name]["route"].public_url for name in ("static", "echo")}
    static_prefix, echo_prefix = ("/" + url.split("/", 3)[3] for url in routes.values())
    origin = env["GPUAAS_ISSUER"]
    print(f"# {machine()}")
    print(f"# load average before: {load_average()}")
    print(
        f"# connection limits raised to {env['GPUAAS_PROXY_MAX_CONNECTIONS_PER_USER']} per user and per "
        "instance for the held WebSockets; proxies log a line per request"
    )

    # The portal logs a line per proxied request, as in production (and as nginx's access_log).
    portal_env = {**env, "GPUAAS_LOG_LEVEL": "INFO"}

    def portal() -> Server:
        log = var_dir / f"portal-{time.monotonic_ns()}.log"
        server = Server(ports["portal"], portal_env, args.asgi_workers, log)
        server.wait_ready()
        return server

    def edge() -> Background:
        return start_dataplane(var_dir, ports["edge"], ports["portal"], env)

    def chp() -> Background:
        return start_chp(
            var_dir, ports["chp"], {static_prefix: ports["upstream"], echo_prefix: ports["echo"]}
        )

    portal_server = processes.add(portal())
    edge_server = processes.add(edge())
    # Through the edge, as the launcher's browser does: the ticket names the route's origin.
    cookies = {name: route_cookie(origin, ticket) for name, ticket in tickets.items()}
    plain = start_nginx(
        "plain",
        var_dir,
        PLAIN_PROXY,
        port=ports["plain"],
        upstream=ports["upstream"],
        echo=ports["echo"],
        static_prefix=static_prefix,
        echo_prefix=echo_prefix,
    )

    def via(name: str, port: int, proxy: list[Background]) -> Target:
        # Every target gets what a browser sends on the route, its cookie and, on a
        # WebSocket, its origin: a browser sends them whatever proxy is in front, and
        # parsing the cookie is part of every proxy's work (about 2k instructions).
        return Target(
            name,
            f"http://127.0.0.1:{port}{static_prefix}page.html",
            f"ws://127.0.0.1:{port}{echo_prefix}echo",
            http_headers={"Cookie": f"_gpuaas_route={cookies['static']}"},
            ws_headers={"Cookie": f"_gpuaas_route={cookies['echo']}", "Origin": origin},
            processes=proxy,
        )

    direct = via("direct", ports["upstream"], [])
    direct.ws_url = f"ws://127.0.0.1:{ports['echo']}{echo_prefix}echo"
    workers = f"{args.asgi_workers} process{'es' if args.asgi_workers > 1 else ''}"
    targets = {
        "direct": direct,
        "asgi": via(f"ASGI proxy (uvicorn, {workers})", ports["portal"], [portal_server]),
        # The portal answers nginx's auth subrequests: its CPU is the data plane's too.
        "dataplane": via("nginx data plane", ports["edge"], [edge_server, portal_server]),
        "plain": via("nginx proxy_pass (no auth: reference)", ports["plain"], [processes.add(plain)]),
        "chp": via("configurable-http-proxy 5.2.0 (peer)", ports["chp"], [processes.add(chp())]),
    }
    if args.instructions or args.goal_only or args.asgi_only:
        measure_one_thing(targets, args)
        return 0
    http = measure_http(targets, args)
    rounds = measure_share(targets, args)
    lapsed = measure_lapsed_grant(targets)
    asgi_ratios = measure_asgi_share(targets, args)
    websockets = measure_websockets(targets, args)

    # Memory from a fresh start: each proxy's processes anew, idle but warm.
    def restart(key: str) -> None:
        if key in ("asgi", "dataplane"):
            processes.restart(targets["asgi"], portal)
            targets["dataplane"].processes[1] = targets["asgi"].processes[0]
        if key == "dataplane":
            processes.restart(targets["dataplane"], edge)
        if key == "chp":
            processes.restart(targets["chp"], chp)

    memory = measure_memory({key: targets[key] for key in ("asgi", "dataplane", "chp")}, args, restart)
    goals(http, rounds, lapsed, asgi_ratios, memory)
    print(f"# load average after: {load_average()}")
    from django.db import connections

    connections.close_all()
    failures = [
        *(f"{targets[k].name}: {r.errors} failed requests" for k, r in http.items() if r.errors),
        *(f"{targets[k].name}: {r['errors']} wrong echoes" for k, r in websockets.items() if r["errors"]),
        *(
            f"{targets[k].name}: {m.opened} of {args.websockets} WebSockets opened, {m.alive} held"
            for k, m in memory.items()
            if m.alive < args.websockets
        ),
    ]
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
