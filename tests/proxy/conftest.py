"""A running app instance whose proxy route points at a local upstream.

The instance goes through the real runtime: launched by a project admin, its
start task claimed and reported by "the agent" (the test) with the upstream's
host and port, so the route is planned, activated and resolved exactly as in
production.
"""

from __future__ import annotations

import copy
import json

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore

from apps.catalog import services as catalog
from apps.catalog.models import App
from apps.proxy import access, sessions
from apps.runtime import services as runtime
from apps.tenancy import principal as principals
from tests.runtime.conftest import SHIPPED, active_allocation, allocator, flavor, nodes, ready_tenant  # noqa: F401  # noqa: F401


def proxied_manifest(**proxy) -> dict:
    """JupyterLab's manifest with its web endpoint's proxy block changed by ``proxy``."""
    manifest = json.loads((SHIPPED / "jupyterlab.json").read_text())
    endpoint = manifest["endpoints"][0]
    endpoint["proxy"] = {**endpoint["proxy"], **proxy}
    return manifest


def publish_manifest(slug: str, manifest: dict) -> App:
    app = App.objects.create(slug=slug, name=slug.title(), entitled_to_all=True)
    catalog.publish_version(None, app, version="1.0.0", manifest=copy.deepcopy(manifest))
    return app


def login_session(user) -> SessionStore:
    """A platform session for ``user``, as the portal's login makes one."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session


def start_instance(user, project, allocation, app: App, *, host: str, port: int):
    """Launch ``app`` as ``user`` and report it running at ``host:port``."""
    operation = runtime.launch(
        principals.for_user(user), project, app_slug=app.slug, allocation_id=allocation.pk
    )
    instance = operation.instance
    node = allocation.node
    for task in runtime.claim_tasks(node):
        runtime.report_task(
            node, task.pk, succeeded=True, endpoints=[{"name": "web", "host": host, "port": port}]
        )
    instance.refresh_from_db()
    assert instance.state == "running"
    access.forget()
    return instance


def mint_ticket(user, instance, session=None, endpoint: str = "web") -> dict:
    """What the launcher gets from ``POST /api/v1/workloads/{iid}/ui/session``."""
    return sessions.mint(principals.for_user(user), instance, endpoint, session or login_session(user))


@pytest.fixture
def owner(project):
    from tests.conftest import member

    return member("project_admin", project=project)
