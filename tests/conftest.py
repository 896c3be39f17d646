from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from apps.core import correlation
from apps.tenancy.auth import platform_tokens, trusted_issuers
from apps.tenancy.models import Membership
from tests.factories import ProjectFactory, TenantFactory, UserFactory
from tests.support.issuer import FakeIssuer
from tests.support.receiver import WebhookReceiver
from tests.support.servers import ThreadedUvicorn


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
def api():
    return APIClient()


WEBHOOK_SECRET = "ccp-shared-secret"


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
def ccp_issuer(settings):
    issuer = FakeIssuer()
    settings.TRUSTED_ISSUERS = [issuer.config]
    yield issuer
    issuer.close()


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


def member(role: str, *, tenant=None, project=None, limit: str = ""):
    user = UserFactory()
    Membership.objects.create(
        user=user,
        tenant=tenant or (project.tenant if project else None),
        project=project,
        role=role,
        limit=limit,
    )
    return user


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
def portal_server():
    """The portal's ASGI application served by uvicorn in a thread (live pages' sockets)."""
    server = ThreadedUvicorn().start()
    yield server
    server.stop()


def session_cookie(user) -> str:
    """The Cookie header of a browser signed in to the portal as ``user``."""
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"
