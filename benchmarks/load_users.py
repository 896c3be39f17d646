"""The users of ``benchmarks/load.py``: its locustfile, run by locust headless in a
process of its own (gevent's monkey-patching stays out of the script that seeds).

The script hands over who signs in as what in the JSON file named by
``GPUAAS_LOAD_PLAN`` and reads every request's class, name, latency and error back
from ``GPUAAS_LOAD_OUT``: percentiles per endpoint class (page, api, proxy) need the
raw latencies, which locust's own statistics keep only per name and rounded.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid

from locust import FastHttpUser, between, events, task

PLAN = json.loads(open(os.environ["GPUAAS_LOAD_PLAN"]).read())  # noqa: SIM115 - read once at import
# Requests in the first seconds (connections opened, caches and the JWKS fetched) are not counted.
MEASURE_FROM = time.time() + PLAN["warmup"]
SAMPLES: dict[str, list[float]] = {}
ALL_REQUESTS: dict[str, int] = {}  # per class, the warm-up's too: what the servers' CPU was spent on
ERRORS: list[str] = []
WINDOW = {"first": None, "last": None}


@events.request.add_listener
def record(request_type, name, response_time, response_length, exception, **kwargs):
    kind = name.split(":", 1)[0]
    ALL_REQUESTS[kind] = ALL_REQUESTS.get(kind, 0) + 1
    if exception is not None:  # counted in the warm-up too: the goal is zero
        ERRORS.append(f"{name}: {str(exception)[:200]}")
    now = time.time()
    if now < MEASURE_FROM:
        return
    SAMPLES.setdefault(name, []).append(response_time)
    WINDOW["first"] = WINDOW["first"] or now
    WINDOW["last"] = now


@events.quitting.add_listener
def write_out(environment, **kwargs):
    with open(os.environ["GPUAAS_LOAD_OUT"], "w") as out:
        json.dump({"samples": SAMPLES, "errors": ERRORS, "window": WINDOW, "all_requests": ALL_REQUESTS}, out)


def checked(response, expected: tuple[int, ...]) -> None:
    """A status outside ``expected`` counts as the request's error."""
    if response.status_code not in expected:
        response.failure(f"{response.status_code} {response.text[:120]!r}")


class PortalUser(FastHttpUser):
    """A tenant administrator in the portal with a browser session: the dashboard,
    an allocation list and one allocation of it, the usage page."""

    fixed_count = PLAN["portal_users"]
    wait_time = between(1, 3)

    def on_start(self):
        self.me = random.choice(PLAN["portal"])
        self.headers = {"Cookie": self.me["cookie"], "Accept": "text/html"}

    def get(self, path: str, name: str) -> None:
        with self.client.get(path, headers=self.headers, name=name, catch_response=True) as response:
            checked(response, (200,))

    @task(2)
    def dashboard(self):
        self.get("/", "page: dashboard")

    @task(3)
    def allocation_list(self):
        self.get(f"/projects/{self.me['project']}/allocations/", "page: allocation list")

    @task(3)
    def allocation_detail(self):
        allocation = random.choice(self.me["allocations"])
        self.get(f"/projects/{self.me['project']}/allocations/{allocation}/", "page: allocation detail")

    @task(1)
    def usage(self):
        self.get(f"/tenants/{self.me['tenant']}/usage/", "page: usage")


class Operator(FastHttpUser):
    """A platform administrator paging through the platform-wide project list."""

    fixed_count = PLAN["operators"]
    wait_time = between(2, 5)

    @task
    def project_list(self):
        page = random.randint(1, PLAN["project_pages"])
        with self.client.get(
            f"/projects/?page={page}",
            headers={"Cookie": PLAN["operator_cookie"], "Accept": "text/html"},
            name="page: platform project list",
            catch_response=True,
        ) as response:
            checked(response, (200,))


class CcpClient(FastHttpUser):
    """CCP's integration for one tenant's project: it allocates a node, polls its status
    until ACTIVE, polls a while, releases it and polls until RELEASED; between
    allocations it polls the status of nodes the tenant held before."""

    fixed_count = PLAN["ccp_clients"]
    wait_time = between(0.5, 1.5)

    def on_start(self):
        self.me = PLAN["ccp"].pop(0)  # one client a tenant: quotas are per tenant
        self.headers = {"Authorization": f"Bearer {self.me['token']}"}
        self.node = None
        self.state = None
        self.polls = 0

    def status(self, node: str) -> str | None:
        with self.client.get(
            f"/api/baremetal-manager/{node}/status",
            headers=self.headers,
            name="api: ccp status",
            catch_response=True,
        ) as response:
            checked(response, (200,))
            return response.json().get("state") if response.status_code == 200 else None

    @task
    def step(self):
        if self.node is None:
            if random.random() < 0.5:
                self.status(random.choice(self.me["past_nodes"]))
                return
            self.allocate()
        elif self.state == "ACTIVE" and self.polls >= 3:
            self.release()
        elif self.state == "FAILED":
            self.node = None
        else:
            self.state = self.status(self.node)
            self.polls += 1
            if self.state in ("RELEASED", None) and self.polls > 1:
                self.node = None

    def allocate(self):
        body = {
            "flavor": PLAN["flavor"],
            "os_image": PLAN["os_image"],
            "tenant_id": self.me["tenant_id"],
            "project_id": self.me["project_id"],
        }
        with self.client.post(
            "/api/baremetal-manager/allocate",
            json=body,
            headers={**self.headers, "Idempotency-Key": uuid.uuid4().hex},
            name="api: ccp allocate",
            catch_response=True,
        ) as response:
            checked(response, (202,))
            if response.status_code == 202:
                self.node, self.state, self.polls = response.json()["node_id"], "PENDING", 0

    def release(self):
        with self.client.post(
            f"/api/baremetal-manager/{self.node}/release",
            json={"drain": False},
            headers={**self.headers, "Idempotency-Key": uuid.uuid4().hex},
            name="api: ccp release",
            catch_response=True,
        ) as response:
            checked(response, (202,))
        self.state, self.polls = "RELEASING", 0


class AppVisitor(FastHttpUser):
    """Someone using an app through the nginx data plane: its route's page, with the
    route cookie, on the app's own host."""

    fixed_count = PLAN["proxy_users"]
    wait_time = between(0.2, 0.6)

    @task
    def app_page(self):
        route = PLAN["proxy"]
        with self.client.get(
            route["path"],
            headers={"Host": route["host"], "Cookie": route["cookie"], "Accept": "text/html"},
            name="proxy: app page",
            catch_response=True,
        ) as response:
            checked(response, (200,))
