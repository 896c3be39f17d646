"""Every kind of secret the platform keeps, made the way users and the platform make
them, then looked for in plain text where it must never be: every table of the
database, the pages people and operators see, the logs, and Celery task bodies. Both
secrets-store backends (``vault``: a real OpenBao)."""

from __future__ import annotations

import json
import logging

import pytest
from celery.signals import before_task_publish, task_prerun
from django.db import connection

from apps.access.models import AccessCredential, ProjectSecret
from apps.core import secrets
from apps.runtime import selectors
from apps.tenancy import services as tenancy
from apps.tenancy.models import SigningKey
from tests.support.pages import client_for
from tests.support.proxy import start_instance

pytestmark = pytest.mark.django_db

HF_TOKEN = "hf_scan_me_if_you_can_0123456789abcdef"


@pytest.fixture
def task_bodies():
    """What every Celery task was sent and run with (eager tasks are not published)."""
    seen: list[str] = []

    def published(body=None, **kwargs):
        seen.append(repr(body))

    def running(args=None, kwargs=None, **extra):
        seen.append(repr((args, kwargs)))

    before_task_publish.connect(published, weak=False)
    task_prerun.connect(running, weak=False)
    yield seen
    before_task_publish.disconnect(published)
    task_prerun.disconnect(running)


def database_dump() -> str:
    """Every row of every table, as text."""
    lines = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            lines.extend(f"{table}: {row!r}" for row in cursor.fetchall())
    return "\n".join(lines)


def _distinctive(pem: str) -> list[str]:
    """A PEM's body lines: any of them in plain text would give the key away."""
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


@pytest.fixture
def every_secret(
    task_bodies,
    caplog,
    api,
    secrets_backend,
    project,
    project_admin,
    platform_admin,
    jupyterlab,
    vllm,
    active_allocation,
    django_capture_on_commit_callbacks,
):
    """The plain values of one secret of each kind (logs and task bodies captured from
    before the allocation was provisioned)."""
    caplog.set_level(logging.DEBUG)
    admin = client_for(project_admin)
    with django_capture_on_commit_callbacks(execute=True):
        api.force_login(project_admin)
        api.post(
            f"/api/v1/projects/{project.pk}/secrets",
            {"name": "hf-token", "value": HF_TOKEN},
            format="json",
            HTTP_IDEMPOTENCY_KEY="secret-1",
        )
        created = api.post(
            f"/api/v1/projects/{project.pk}/access-credentials",
            {"name": "controller"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="credential-1",
        ).json()
        shown_once = admin.post(f"/projects/{project.pk}/access-credentials/", {"name": "portal-made"})
        account = api.post(
            f"/api/v1/projects/{project.pk}/service-accounts",
            {"name": "controller", "role": "project_admin"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="account-1",
        ).json()
        token, _ = tenancy.issue_token(account["client_id"], account["client_secret"])  # makes a signing key
        delivered = api.post(
            f"/api/v1/projects/{project.pk}/access-credentials/{created['id']}/deliver",
            {"purpose": "scan"},
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert delivered.status_code == 200
        instance = start_instance(
            project_admin, project, active_allocation, jupyterlab, host="127.0.0.1", port=41999
        )
    portal_key = AccessCredential.objects.get(name="portal-made")
    assert "OPENSSH PRIVATE KEY" in shown_once.content.decode()  # the one page that shows it
    key = SigningKey.objects.get()
    return {
        "instance": instance,
        "values": {
            "project secret": [HF_TOKEN],
            "access credential (API)": _distinctive(created["private_key"]),
            "access credential (portal)": _distinctive(secrets.store().read(portal_key.secret_path)),
            "app token": [selectors.runtime_secret(instance, "token")],
            "signing key": _distinctive(secrets.store().read(key.secret_path)),
            "service account secret": [account["client_secret"]],
        },
    }


def _leaks(text: str, values: dict[str, list[str]]) -> list[str]:
    return [kind for kind, parts in values.items() if any(part in text for part in parts)]


def test_no_secret_in_plain_text_anywhere(
    every_secret, project, project_admin, platform_admin, caplog, task_bodies
):
    values = every_secret["values"]
    instance = every_secret["instance"]
    assert all(all(parts) for parts in values.values())

    admin, operator = client_for(project_admin), client_for(platform_admin)
    pages = [
        admin.get(f"/projects/{project.pk}/secrets/"),
        admin.get(f"/projects/{project.pk}/access-credentials/"),
        admin.get(f"/projects/{project.pk}/service-accounts/"),
        admin.get(f"/projects/{project.pk}/instances/{instance.pk}/"),
        admin.get(f"/projects/{project.pk}/apps/vllm-openai/launch/"),
        operator.get("/audit/"),
        operator.get("/admin/access/accesscredential/"),
        operator.get(f"/admin/access/accesscredential/{AccessCredential.objects.first().pk}/change/"),
        operator.get("/admin/access/projectsecret/"),
        operator.get(f"/admin/access/projectsecret/{ProjectSecret.objects.get().pk}/change/"),
        operator.get(f"/admin/tenancy/signingkey/{SigningKey.objects.get().pk}/change/"),
        operator.get("/admin/core/idempotencyrecord/"),
        operator.get(f"/admin/runtime/appinstance/{instance.pk}/change/"),
    ]
    assert [page.status_code for page in pages] == [200] * len(pages)
    rendered = "\n".join(page.content.decode() for page in pages)
    assert '<option value="hf-token">hf-token</option>' in pages[4].content.decode()  # launch names it
    assert len(rendered) > 10_000  # the pages rendered (a 404 would prove nothing)

    dump = database_dump()
    assert AccessCredential.objects.first().public_key in dump  # the dump holds what the records hold
    assert _leaks(dump, values) == []
    assert _leaks(rendered, values) == []
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert len(records) > 20
    assert (
        _leaks(json.dumps([{**r.__dict__, "text": r.getMessage()} for r in records], default=str), values)
        == []
    )
    assert task_bodies, "the scenario ran Celery tasks"
    assert _leaks("\n".join(task_bodies), values) == []
