"""Fixtures every test directory may use: callers in each role, the fleet with an
ACTIVE allocation, a real node agent and the proxy's data planes. Their helpers live
in tests/support/; a directory's own fixtures stay in its conftest.py."""

from __future__ import annotations

import uuid
from importlib import import_module
from pathlib import Path

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from apps.allocations import services as allocations
from apps.core import correlation
from apps.tenancy import principal as principals
from apps.tenancy.auth import platform_tokens, trusted_issuers
from tests.factories import FlavorFactory, ProjectFactory, TenantFactory, UserFactory
from tests.support.agent import running_agent
from tests.support.catalog import publish
from tests.support.fleet import made_ready, make_nodes
from tests.support.issuer import FakeIssuer
from tests.support.members import member
from tests.support.nginx import CONF_DIR, Nginx
from tests.support.openbao import OpenBao
from tests.support.processes import RedisServer, free_port
from tests.support.proxy import (
    APPS_DOMAIN,
    AUTH_SECRET,
    DataPlane,
    Upstream,
    proxied_manifest,
    start_instance,
)
from tests.support.receiver import WEBHOOK_SECRET, WebhookReceiver
from tests.support.servers import ThreadedUvicorn


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items):
    """After pytest-django's order, the heavy tests that leave the test database alone
    (benchmark smokes, on databases of their own) go first: it puts tests without a
    database last, where these minutes-long ones left one worker running alone while
    the other waited. Those that flush it (``heavy(flushes=True)``) stay where it put
    them, after the tests that need the rows migrations wrote."""
    result = yield
    items.sort(key=lambda item: not _heavy_and_apart_from_the_test_database(item))
    return result


def _heavy_and_apart_from_the_test_database(item) -> bool:
    heavy = item.get_closest_marker("heavy")
    fixtures = set(getattr(item, "fixturenames", ()))
    return (
        heavy is not None
        and not heavy.kwargs.get("flushes")
        and item.get_closest_marker("django_db") is None
        and not fixtures & {"db", "transactional_db", "live_server"}
    )


@pytest.fixture(autouse=True)
def _isolated_caches():
    """Each test starts with empty caches: nothing leaks between tests of one worker."""
    cache.clear()
    trusted_issuers.forget_cached_keys()
    platform_tokens.forget_cached_keys()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _fresh_correlation_context():
    """Each test starts outside any unit of work: an id that work outside a request
    (a fixture's audit event) fixed in this thread does not carry into the next test."""
    token = correlation.set(None)
    yield
    correlation.reset(token)


@pytest.fixture
def shipped_alert_rules(db):
    """The alert rules the data migration ships, again after a transactional test's
    flush emptied the table (as a fresh database has them, changed by nobody)."""
    from django.apps import apps

    shipped = import_module("apps.monitoring.migrations.0003_shipped_alert_rules")
    shipped.ship(apps, None)


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def receiver(settings):
    """CCP's webhook receiver, checking signatures; delivered to without jitter."""
    server = WebhookReceiver(secret=WEBHOOK_SECRET)
    settings.CCP_WEBHOOK_URL = server.url + "/"
    settings.CCP_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.WEBHOOK_JITTER = False
    yield server
    server.close()


@pytest.fixture
def redis_server(tmp_path):
    """A private ``redis-server`` a test may kill and start again (``restart``)."""
    server = RedisServer(free_port(), tmp_path / "redis.log", str(tmp_path))
    server.wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def openbao(tmp_path_factory):
    """A real OpenBao dev server for the session (one per xdist worker, on its own port)."""
    server = OpenBao(tmp_path_factory.mktemp("openbao") / "bao.log").start()
    yield server
    server.stop()


@pytest.fixture(params=["local", "vault"])
def secrets_backend(request, settings) -> str:
    """Each secrets-store backend in turn; ``vault`` is the session's OpenBao, under a
    prefix of the test's own so tests never see each other's secrets."""
    if request.param == "vault":
        server = request.getfixturevalue("openbao")
        settings.VAULT_ADDR, settings.VAULT_TOKEN = server.addr, server.token
        settings.VAULT_PREFIX = f"test-{uuid.uuid4().hex}/"
    settings.SECRETS_BACKEND = request.param
    return request.param


@pytest.fixture
def ccp_issuer(settings):
    issuer = FakeIssuer()
    settings.TRUSTED_ISSUERS = [issuer.config]
    yield issuer
    issuer.close()


# --- tenants, projects and their people --------------------------------------------------


@pytest.fixture
def tenant(db):
    return TenantFactory(tenant_id="acme", name="Acme")


@pytest.fixture
def project(tenant):
    return ProjectFactory(tenant=tenant, project_id="cell-1", name="Cell 1")


@pytest.fixture
def other_project(tenant):
    return ProjectFactory(tenant=tenant, project_id="cell-2", name="Cell 2")


@pytest.fixture
def other_tenant_project(db):
    return ProjectFactory(tenant=TenantFactory(tenant_id="globex", name="Globex"), project_id="g-1")


@pytest.fixture
def tenant_admin(tenant):
    return member("tenant_admin", tenant=tenant)


@pytest.fixture
def project_admin(project):
    return member("project_admin", project=project)


@pytest.fixture
def viewer(project):
    return member("viewer", project=project)


@pytest.fixture
def platform_admin(db):
    return UserFactory(is_superuser=True, is_staff=True)


@pytest.fixture
def portal():
    """The portal's ASGI application served by uvicorn in a thread (live pages' sockets,
    node agents); the browser tests serve it their own way (tests/e2e/conftest.py)."""
    server = ThreadedUvicorn().start()
    yield server
    server.stop()


# --- the fleet, and an ACTIVE allocation through the real pipeline -------------------------


@pytest.fixture
def flavor(db):
    return FlavorFactory(name="h100-8x", rate_per_node_hour="98.32")


@pytest.fixture
def small_flavor(db):
    return FlavorFactory(name="h100-1x", gpus_per_node=1, cpu_cores=16, memory_gb=256)


@pytest.fixture
def nodes(flavor):
    return make_nodes(flavor, 4)


@pytest.fixture
def ready_tenant(tenant):
    """The ``acme`` tenant with its network, storage and a roomy quota."""
    return made_ready(tenant)


@pytest.fixture
def allocator(ready_tenant, project):
    return member("project_admin", project=project)


@pytest.fixture
def active_allocation(allocator, project, nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        [allocation] = allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
    allocation.refresh_from_db()
    assert allocation.state == "ACTIVE"
    # An agent is enrolled on the node (tests play its part, or start a real one that re-enrolls),
    # from this machine: its apps are reached on loopback.
    type(allocation.node).objects.filter(pk=allocation.node_id).update(
        credential_hash="0" * 64, agent_address="127.0.0.1"
    )
    allocation.node.refresh_from_db()
    return allocation


@pytest.fixture
def node_agent(portal, active_allocation, tmp_path):
    """An enrolled agent for the allocation's node, started (see ``running_agent``)."""
    with running_agent(portal.url, active_allocation.node, tmp_path) as agent:
        yield agent


# --- catalog apps, and instances behind the proxy's data planes ---------------------------


@pytest.fixture
def jupyterlab(db):
    return publish("jupyterlab")


@pytest.fixture
def vllm(db):
    return publish("vllm-openai")


@pytest.fixture
def owner(project):
    return member("project_admin", project=project)


@pytest.fixture(scope="session")
def upstream():
    """The test app of ``tests.support.upstream``, in its own process."""
    server = Upstream.start()
    yield server
    server.stop()


@pytest.fixture
def proxy_server(settings):
    """The portal's ASGI application under uvicorn; the issuer is its address, so
    routes are planned on it."""
    server = ThreadedUvicorn().start()
    settings.ISSUER = server.url
    yield server
    server.stop()


@pytest.fixture
def nginx_with(settings, proxy_server):
    """``nginx_with(portal=..., conf_dir=..., edit=...)``: nginx (docker/nginx.conf,
    its text changed by ``edit``) in front of the portal, or of another address, with
    docker/nginx/ or a copy; routes are planned on its address."""
    started = []

    def start(*, portal: str | None = None, conf_dir: Path = CONF_DIR, **options) -> Nginx:
        settings.PROXY_AUTH_SECRET = AUTH_SECRET
        portal = portal or f"127.0.0.1:{proxy_server.port}"
        server = Nginx(portal, AUTH_SECRET, apps_domain=APPS_DOMAIN, conf_dir=conf_dir, **options).start()
        started.append(server)
        settings.ISSUER = server.url
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def nginx(nginx_with):
    """nginx (docker/nginx.conf) in front of the portal; routes are planned on its address."""
    return nginx_with()


@pytest.fixture(params=["asgi", "nginx"])
def data_plane(request, proxy_server) -> DataPlane:
    """Each data plane in turn, for what both must do (docs/decisions/0016: where they differ)."""
    server = proxy_server if request.param == "asgi" else request.getfixturevalue("nginx")
    return DataPlane(request.param, server)


@pytest.fixture
def launch(request, owner, project, upstream, proxy_server):
    """``launch(**proxy)``: a running instance of a JupyterLab-like app (its proxy
    block changed by ``proxy``) whose route leads to the test upstream."""
    allocation = request.getfixturevalue("active_allocation")
    made = []

    def launch(*, host: str | None = None, port: int | None = None, manifest: dict | None = None, **proxy):
        app = publish(f"webapp-{len(made)}", manifest or proxied_manifest(**proxy))
        instance = start_instance(
            owner, project, allocation, app, host=host or upstream.host, port=port or upstream.port
        )
        made.append(instance)
        return instance

    return launch
