"""Talking to app instances through the platform proxy: launching one whose route leads
to a given upstream, the launcher's ticket and route cookie, and clients of a route."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apps.allocations.models import Allocation, Node
from apps.catalog.models import App, Flavor
from apps.core import outbound
from apps.proxy import access, sessions
from apps.runtime import agents
from apps.runtime import services as runtime
from apps.tenancy import principal as principals
from apps.tenancy.models import Project, Tenant
from tests.factories import shipped_manifest
from tests.support.fleet import acme, active, cell_1, h100_8x, make_nodes, ready
from tests.support.members import member
from tests.support.nginx import Nginx
from tests.support.processes import free_port
from tests.support.servers import ThreadedUvicorn

ROOT = Path(__file__).resolve().parents[2]
AUTH_SECRET = "nginx-and-portal-share-this"
APPS_DOMAIN = "apps.localhost"


def proxied_manifest(**proxy) -> dict:
    """JupyterLab's manifest with its web endpoint's proxy block changed by ``proxy``."""
    manifest = shipped_manifest("jupyterlab")
    endpoint = manifest["endpoints"][0]
    endpoint["proxy"] = {**endpoint["proxy"], **proxy}
    return manifest


def login_session(user) -> SessionStore:
    """A platform session for ``user``, as the portal's login makes one."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session


@dataclass
class Launchpad:
    """What ``tests/conftest.py``'s fixtures of those names make for ``launch``: the
    ``acme`` tenant, ready, its project ``cell-1`` with an ACTIVE allocation of one of
    four h100-8x nodes through the allocation pipeline, and two of its project admins:
    the one who allocated it and the ``owner`` of the instances."""

    tenant: Tenant
    project: Project
    owner: User
    allocator: User
    flavor: Flavor
    nodes: list[Node]
    allocation: Allocation


def launchpad(capture) -> Launchpad:
    """Made in the fixtures' order; ``capture``: django_capture_on_commit_callbacks."""
    tenant = acme()
    project = cell_1(tenant)
    owner = member("project_admin", project=project)
    ready(tenant)
    allocator = member("project_admin", project=project)
    flavor = h100_8x()
    nodes = make_nodes(flavor, 4)
    allocation = active(allocator, project, capture)
    return Launchpad(tenant, project, owner, allocator, flavor, nodes, allocation)


def start_instance(user, project, allocation, app: App, *, host: str, port: int):
    """Launch ``app`` as ``user`` and report it running at ``host:port``."""
    operation = runtime.launch(
        principals.for_user(user), project, app_slug=app.slug, allocation_id=allocation.pk
    )
    instance = operation.instance
    node = allocation.node
    for task in agents.claim_tasks(node):
        agents.report_task(
            node, task.pk, succeeded=True, endpoints=[{"name": "web", "host": host, "port": port}]
        )
    instance.refresh_from_db()
    assert instance.state == "running"
    access.forget()
    return instance


def mint_ticket(user, instance, session=None, endpoint: str = "web") -> dict:
    """What the launcher gets from ``POST /api/v1/workloads/{iid}/ui/session``."""
    return sessions.mint(principals.for_user(user), instance, endpoint, session or login_session(user))


@dataclass
class Upstream:
    """The test app of ``tests.support.upstream``, in its own process."""

    host: str
    port: int
    process: subprocess.Popen | None = None

    @classmethod
    def start(cls) -> Upstream:
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "tests.support.upstream", str(port)], cwd=ROOT)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return cls("127.0.0.1", port, process)
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    process.kill()
                    raise RuntimeError("the test upstream did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.kill()  # streams a test left open would hold up a graceful stop
        self.process.wait(timeout=10)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def get(self, path: str, **params) -> dict:
        """A direct request (not through the proxy), to read what the app saw."""
        return httpx.get(f"{self.url}/{path}", params=params, timeout=10, trust_env=False).json()


@dataclass
class DataPlane:
    """What the browser talks to: ``asgi``, the portal's own proxy, or ``nginx`` in front of it."""

    kind: str
    server: ThreadedUvicorn | Nginx

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def rss(self) -> int:
        """Resident memory of what a request passes through here: this process (the
        client and the portal) and, for nginx, its master and workers."""
        processes = [psutil.Process()]
        if self.kind == "nginx":
            processes += [psutil.Process(self.server.process.pid), *self.server.workers()]
        return sum(process.memory_info().rss for process in processes)


@contextlib.contextmanager
def memory_growth(data_plane: DataPlane) -> Iterator[list[int]]:
    """How far the data plane's resident memory rose above where it started while the
    block ran (``growth[0]`` once it has), sampled every 50 ms."""
    baseline = data_plane.rss()
    growth = [0]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            growth[0] = max(growth[0], data_plane.rss() - baseline)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield growth
    finally:
        done.set()
        sampler.join()
        growth[0] = max(growth[0], data_plane.rss() - baseline)


def route_url(instance, path: str = "") -> str:
    """The route's public address, plus ``path`` (relative to the route's root)."""
    return instance.proxy_routes.get().public_url.rstrip("/") + "/" + path.lstrip("/")


def open_session(server, user, instance, *, host: str | None = None, session=None) -> str:
    """What the launcher does: post a fresh ticket to the route's origin; the route
    cookie. ``session``: the platform session it hangs on (a new login otherwise)."""
    minted = mint_ticket(user, instance, session)
    response = httpx.post(
        f"{server.url}/_gpuaas/session",
        data={"ticket": minted["ticket"]},
        headers={"Host": host} if host else {},
        trust_env=False,
        verify=outbound.tls(),
        timeout=30,  # the portal runs in this process, beside a busy suite
    )
    assert response.status_code == 303, response.text
    return response.cookies[sessions.COOKIE]


# What a browser's navigation asks for (Firefox's and Chromium's Accept); the proxy's
# refusals answer it with a page, any other client with the JSON error envelope.
NAVIGATION = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def browser(server, cookie: str | None = None, **kwargs) -> httpx.Client:
    """An HTTP client that navigates as a browser on the route would, with the route cookie."""
    headers = {"Accept": NAVIGATION}
    if cookie:
        headers["Cookie"] = f"{sessions.COOKIE}={cookie}"
    return httpx.Client(
        headers=headers, trust_env=False, timeout=httpx.Timeout(20.0), verify=outbound.tls(), **kwargs
    )


def ws_url(instance, path: str) -> str:
    return route_url(instance, path).replace("http://", "ws://", 1)


def handshake(server, cookie: str | None = None, origin: str | None = "route") -> dict:
    """``connect`` options: the route cookie, and the route's ``Origin`` (or ``origin``, or none)."""
    headers = {}
    if cookie:
        headers["Cookie"] = f"{sessions.COOKIE}={cookie}"
    if origin:
        headers["Origin"] = server.url if origin == "route" else origin
    return {"additional_headers": headers, "proxy": None, "open_timeout": 10}


def refused_status(url: str, **kwargs) -> int:
    """The status a WebSocket handshake to ``url`` is refused with."""

    async def attempt():
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, **kwargs):
                pass
        return refused.value.response.status_code

    return asyncio.run(attempt())


def eventually(check, seconds: float = 15.0):
    """``check()`` once it is truthy, or its last answer after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def everything_seen(response: httpx.Response) -> str:
    """All the browser can read of a response: URL, status line, headers, body."""
    return "\n".join(
        [str(response.url), *(f"{k}: {v}" for k, v in response.headers.multi_items()), response.text]
    )
