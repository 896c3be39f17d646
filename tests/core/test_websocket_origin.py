"""The portal's WebSockets accept only the portal's own origin: not every allowed
host (on the embedded default every ``*.localhost``), and never an apps-domain host,
where tenants' pages run. Through the real ASGI server."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.members import member
from tests.support.pages import handshake, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def outcome(portal, project, origin: str | None, host: str = "127.0.0.1") -> int | str:
    url = f"ws://{host}:{portal.port}/ws/projects/{project.pk}/allocations/"
    headers = {"Cookie": session_cookie(member("tenant_admin", tenant=project.tenant))}
    if origin is not None:
        headers["Origin"] = origin
    return asyncio.run(handshake(url, headers))


@pytest.fixture
def apps_domain(settings):
    settings.APPS_DOMAIN = "apps.localhost"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, ".localhost", ".apps.localhost"]


def test_the_portals_own_origin_opens_the_socket(portal, project, apps_domain):
    assert outcome(portal, project, portal.url) == "open"


def test_the_portal_browsed_under_another_of_its_names_opens_the_socket(portal, project):
    # The embedded default is configured as 127.0.0.1 and answers as localhost too.
    assert outcome(portal, project, f"http://localhost:{portal.port}", host="localhost") == "open"


def test_the_configured_issuer_origin_opens_the_socket(portal, project, settings):
    # Behind a proxy that rewrites Host, the platform's public origin still matches.
    settings.ISSUER = "https://gpuaas.example.com"
    assert outcome(portal, project, "https://gpuaas.example.com") == "open"


@pytest.mark.parametrize(
    "origin",
    [
        "http://i-1234.apps.localhost:{port}",  # a tenant's app, on an allowed host
        "http://other.localhost:{port}",  # another allowed host
        "http://localhost:{port}",  # allowed, but not where this socket was opened
        "https://127.0.0.1:{port}",  # another scheme is another origin
        "http://127.0.0.1:1",  # another port too
        "null",
        None,
    ],
)
def test_any_other_origin_is_refused(portal, project, apps_domain, origin):
    given = origin.format(port=portal.port) if origin else None
    assert outcome(portal, project, given) == 403


def test_the_apps_domain_is_refused_even_as_the_issuer_host(portal, project, settings):
    settings.APPS_DOMAIN = "127.0.0.1"  # misconfigured: the portal inside the apps domain
    assert outcome(portal, project, portal.url) == 403
