"""A dependency down under the production topology (``manage.py serve`` on PostgreSQL
and a Redis of its own): requests answer 503 ``unavailable`` with ``Retry-After``,
never a 500 and never a hang; ``/readyz`` names what is down; the first request once
it is back succeeds (the pooled connections it dropped are not handed out again).

Redis is a private ``redis-server``, killed and started again empty. PostgreSQL is
the shared server behind a TCP path that is cut (every connection reset, new ones
refused) and restored: a crash as the portal sees it.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from django.utils import timezone

from apps.allocations import services
from apps.allocations.models import Allocation
from apps.networking import services as networking
from apps.tenancy import services as tenancy
from apps.tenancy import tasks as tenant_tasks
from apps.tenancy.principal import for_user
from gpuaas import prodlocal
from tests.support.members import member
from tests.support.processes import PRODUCTION_ENV, CuttablePath, Server, free_port

pytestmark = [pytest.mark.heavy, pytest.mark.production]

# Long enough for a loaded CI machine, short enough that a request hanging on a dead
# dependency (redis-py's default retries, psycopg's 10 s pool wait) fails the test.
PATIENCE_SECONDS = 5


@pytest.fixture
def database_path():
    path = CuttablePath(
        (connection.settings_dict["HOST"] or "127.0.0.1", int(connection.settings_dict["PORT"] or 5432))
    )
    yield path
    path.cut()


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory):
    """The production var directory, its static files collected (the manifest pages need)."""
    path = tmp_path_factory.mktemp("var")
    prodlocal.collect_static(
        {**PRODUCTION_ENV, "GPUAAS_VAR_DIR": str(path), "REDIS_URL": "redis://127.0.0.1:1/0"}
    )
    return path


@pytest.fixture
def broker_path():
    """The machine's RabbitMQ, reached through a path that can be cut."""
    path = CuttablePath(("127.0.0.1", 5672))
    yield path
    path.cut()


@pytest.fixture
def portal(request, transactional_db, redis_server, database_path, var_dir, tmp_path):
    """The portal in production mode, its database reached through ``database_path``;
    its broker is Redis, or RabbitMQ through ``broker_path`` when the test asks
    (``@pytest.mark.parametrize("portal", ["rabbitmq"], indirect=True)``)."""
    port = free_port()
    name = connection.settings_dict["NAME"]
    env = {
        **PRODUCTION_ENV,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{database_path.port}/{name}",
        "REDIS_URL": redis_server.url,
        "GPUAAS_ISSUER": f"http://127.0.0.1:{port}",
        "GPUAAS_VAR_DIR": str(var_dir),
    }
    if getattr(request, "param", "redis") == "rabbitmq":
        broker, vhost = request.getfixturevalue("broker_path"), request.getfixturevalue("vhost")
        env["GPUAAS_BROKER_URL"] = f"amqp://guest:guest@127.0.0.1:{broker.port}/{vhost}"
    server = Server(port, env, workers=1, log_path=tmp_path / "serve.log")
    server.wait_ready()
    yield server
    server.stop()


@pytest.fixture
def caller(project):
    """A service account's API client and a signed-in browser session, both made
    through the running portal."""
    operator = for_user(member("tenant_admin", tenant=project.tenant))
    issued = tenancy.create_service_account(operator, project, name="ops-probe", role="viewer")
    person = member("project_admin", project=project)
    # Hashed as the portal's own settings hash (the test settings' fast hasher is not there).
    pbkdf2 = PBKDF2PasswordHasher()
    person.password = pbkdf2.encode("pw", pbkdf2.salt())
    person.save(update_fields=["password"])
    return project, issued, person.username


def _signed_in(portal, issued, username: str) -> tuple[httpx.Client, httpx.Client]:
    """The service account's API client and ``username``'s browser session."""
    browser = httpx.Client(base_url=portal.url, timeout=PATIENCE_SECONDS)
    form = browser.get("/accounts/login/")
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert found, (form.status_code, form.text[:300])
    signed = browser.post(
        "/accounts/login/",
        data={"username": username, "password": "pw", "csrfmiddlewaretoken": found.group(1)},
        headers={"Referer": f"{portal.url}/accounts/login/"},
    )
    assert signed.status_code == 302, signed.text[:500]
    return _api(portal, issued), browser


def _api(portal, issued) -> httpx.Client:
    """An API client holding a token the portal issued to the service account."""
    api = httpx.Client(base_url=portal.url, timeout=PATIENCE_SECONDS)
    token = api.post(
        "/api/v1/auth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": issued.account.client_id,
            "client_secret": issued.client_secret,
        },
    )
    assert token.status_code == 200, token.text
    api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    return api


def _wait_ready(portal, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{portal.url}/readyz", timeout=PATIENCE_SECONDS).status_code != 200:
        assert time.monotonic() < deadline, "not ready again after the database returned"
        time.sleep(0.5)


def _unavailable(response: httpx.Response) -> dict:
    assert response.status_code == 503, response.text[:500]
    assert int(response.headers["Retry-After"]) > 0
    return response.json()["error"]


def _assert_answers_503(portal, api, dependency: str) -> None:
    error = _unavailable(api.get("/api/v1/projects"))
    assert error["code"] == "unavailable"
    assert error["details"] == {"dependency": dependency}
    assert error["correlation_id"]
    ready = httpx.get(f"{portal.url}/readyz", timeout=PATIENCE_SECONDS)
    assert ready.status_code == 503
    assert ready.json()["checks"][dependency] == "unavailable"


def test_redis_killed_answers_503_and_the_first_request_after_its_restart_succeeds(
    portal, caller, redis_server
):
    api, browser = _signed_in(portal, *caller[1:])
    assert api.get("/api/v1/projects").status_code == 200
    assert browser.get("/").status_code == 200

    redis_server.stop()
    _assert_answers_503(portal, api, "cache")
    # The dashboard needs only the database (sessions live there): it still answers.
    assert browser.get("/").status_code == 200

    # Started again, empty, where it was: the pool's dropped connections are replaced.
    redis_server.restart()
    redis_server.wait_ready()
    assert api.get("/api/v1/projects").status_code == 200
    assert browser.get("/").status_code == 200
    assert httpx.get(f"{portal.url}/readyz", timeout=PATIENCE_SECONDS).status_code == 200


def test_postgresql_crashed_answers_503_and_the_first_request_after_it_returns_succeeds(
    portal, caller, database_path
):
    api, browser = _signed_in(portal, *caller[1:])
    assert api.get("/api/v1/projects").status_code == 200

    database_path.cut()
    _assert_answers_503(portal, api, "database")
    page = browser.get("/")
    assert page.status_code == 503
    assert int(page.headers["Retry-After"]) > 0
    assert "briefly unavailable" in page.text

    database_path.restore()
    # Traffic comes back when /readyz says so (a load balancer's check); then the first
    # request succeeds: the connections cut with the database are not handed out again.
    _wait_ready(portal)
    assert api.get("/api/v1/projects").status_code == 200
    assert browser.get("/").status_code == 200


@pytest.mark.parametrize("portal", ["rabbitmq"], indirect=True)
def test_an_allocation_accepted_while_the_broker_is_down_is_resumed_by_the_reconciler(
    portal, broker_path, ready_tenant, project, nodes
):
    """The broker (RabbitMQ here, not the cache's Redis) down: an allocation is still
    accepted, as its record is saved; the reconciler's sweep starts it once the broker
    is back, so nothing accepted is lost."""
    operator = for_user(member("tenant_admin", tenant=project.tenant))
    issued = tenancy.create_service_account(operator, project, name="ccp", role="project_admin")
    api = _api(portal, issued)

    broker_path.cut()
    ready = httpx.get(f"{portal.url}/readyz", timeout=PATIENCE_SECONDS)
    assert ready.status_code == 503
    assert ready.json()["checks"] == {"database": "ok", "cache": "ok", "broker": "unavailable"}
    accepted = api.post(
        "/api/baremetal-manager/allocate",
        json={
            "flavor": "h100-8x",
            "os_image": "ubuntu-22.04",
            "tenant_id": project.tenant.tenant_id,
            "project_id": project.project_id,
        },
    )
    assert accepted.status_code == 202, accepted.text
    allocation = Allocation.objects.get(pk=accepted.json()["allocation_id"])
    assert allocation.state == Allocation.State.PENDING

    broker_path.restore()
    _wait_ready(portal)
    # The reconciler's sweep, as beat runs it a minute on (this process runs tasks eagerly).
    assert services.reconcile_stuck(now=timezone.now() + timedelta(minutes=1)) == 1
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE


@pytest.mark.parametrize("portal", ["rabbitmq"], indirect=True)
def test_a_tenant_onboarded_while_the_broker_is_down_is_provisioned_by_its_resume(portal, broker_path):
    """CCP onboards a tenant with the broker down: 201 with the tenant onboarding (a
    503 would be retried for a tenant that exists); resume_onboarding, which beat runs
    every minute, provisions it once the broker is back."""
    networking.load_pool(prefix="vrf", count=2, first_vni=50001, first_vlan=1000)
    issued = tenancy.create_platform_service_account(None, name="ccp", role="platform_integration")
    api = _api(portal, issued)

    broker_path.cut()
    accepted = api.post(
        "/api/tenants", json={"tenant_id": "acme-outage", "name": "Acme", "realm_name": "acme"}
    )
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["status"] == "onboarding"
    assert "left to its sweeper" in portal.log_path.read_text()

    broker_path.restore()
    _wait_ready(portal)
    # The sweep, as beat runs it (this process runs tasks eagerly).
    assert tenant_tasks.resume_onboarding() == 1
    tenant = api.get(f"/api/tenants/{accepted.json()['tenant_id']}").json()
    assert tenant["status"] == "active", tenant["status_reason"]
