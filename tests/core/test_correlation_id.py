"""``X-Correlation-ID``: accepted or generated, echoed, and carried into the error
envelope, audit events, log lines and Celery tasks of the request."""

from __future__ import annotations

import io
import json
import logging
import re
import time

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.db import connections

from apps.core import correlation
from apps.core.logging import CorrelationIdFilter, JsonFormatter
from apps.core.models import AuditEvent
from apps.networking.services import load_pool
from apps.tenancy.models import Tenant
from gpuaas.celery import app as celery_app
from tests.support.world import INTEGRATION_ROLE

VALID = re.compile(r"\A[A-Za-z0-9._-]{8,128}\Z")


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abcdefgh", "x" * 128, "req-2024.01_ab", "0123456789", "A.B_C-D.E"])
def test_a_valid_caller_id_is_echoed(api, value):
    response = api.get("/healthz", HTTP_X_CORRELATION_ID=value)
    assert response["X-Correlation-ID"] == value


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value",
    [
        "",
        "abcdefg",
        "x" * 129,
        "has space",
        "semi;colon",
        "slash/es-ok",
        "ünïcödé-id",
        "abcdefgh\n",
        "tab\tabcdef",
    ],
    ids=[
        "empty",
        "too-short",
        "too-long",
        "space",
        "semicolon",
        "slash",
        "non-ascii",
        "trailing-newline",
        "tab",
    ],
)
def test_an_invalid_caller_id_is_replaced(api, value):
    response = api.get("/healthz", HTTP_X_CORRELATION_ID=value)
    echoed = response["X-Correlation-ID"]
    assert echoed != value
    assert VALID.match(echoed)


@pytest.mark.django_db
def test_each_request_without_an_id_gets_a_fresh_one(api):
    first, second = api.get("/healthz")["X-Correlation-ID"], api.get("/healthz")["X-Correlation-ID"]
    assert VALID.match(first)
    assert VALID.match(second)
    assert first != second


@pytest.mark.django_db
def test_the_id_does_not_leak_past_its_request(api):
    before = correlation.peek()
    api.get("/healthz", HTTP_X_CORRELATION_ID="leaky-id-0001")
    assert correlation.peek() == before != "leaky-id-0001"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "status", "code"),
    [("/api/v1/no-such-endpoint", 404, "not_found"), ("/api/v1/projects", 401, "unauthenticated")],
)
def test_the_error_envelope_carries_the_id(api, path, status, code):
    response = api.get(path, HTTP_X_CORRELATION_ID="envelope-0001")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["correlation_id"] == "envelope-0001" == response["X-Correlation-ID"]


@pytest.mark.django_db
def test_a_generated_id_is_the_one_in_the_envelope(api):
    response = api.get("/api/v1/projects", HTTP_X_CORRELATION_ID="bad id")
    assert response.json()["error"]["correlation_id"] == response["X-Correlation-ID"] != "bad id"


@pytest.mark.django_db
def test_denied_and_validation_errors_carry_it_in_envelope_and_audit(api, project, viewer):
    api.force_login(viewer)
    denied = api.post(
        f"/api/v1/projects/{project.pk}/members",
        {"username": "x", "role": "viewer"},
        format="json",
        HTTP_X_CORRELATION_ID="denied-0001",
    )
    assert denied.status_code == 403
    assert denied.json()["error"]["correlation_id"] == "denied-0001"
    assert AuditEvent.objects.get(outcome="denied").correlation_id == "denied-0001"


# --- log lines ------------------------------------------------------------------------


@pytest.fixture
def json_lines():
    """JSON lines written during the test, by a handler built like the configured one."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(CorrelationIdFilter())
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    root.removeHandler(handler)
    root.setLevel(previous_level)


@pytest.mark.django_db
def test_log_lines_of_a_request_carry_its_id(api, tenant, tenant_admin, json_lines):
    api.force_login(tenant_admin)
    response = api.post(
        "/api/v1/projects",
        {"project_id": "cell-7", "name": "Cell 7"},
        format="json",
        HTTP_X_CORRELATION_ID="logged-0001",
    )
    assert response.status_code == 201
    lines = json_lines()
    audit_lines = [line for line in lines if line["logger"] == "gpuaas.audit"]
    assert audit_lines
    assert all(line["correlation_id"] == "logged-0001" for line in audit_lines)
    assert any("project.create" in line["message"] for line in audit_lines)


@pytest.mark.django_db
def test_log_lines_of_a_refused_request_carry_its_id(api, json_lines):
    response = api.get(
        "/api/v1/projects", HTTP_AUTHORIZATION="Bearer not-a-jwt", HTTP_X_CORRELATION_ID="logged-0002"
    )
    assert response.status_code == 401
    lines = [line for line in json_lines() if line["logger"] in ("gpuaas.auth", "django.request")]
    assert {line["logger"] for line in lines} >= {"gpuaas.auth"}
    assert {line["correlation_id"] for line in lines} == {"logged-0002"}


# --- Celery tasks ----------------------------------------------------------------------


def _onboard(api, ccp_issuer, correlation_id):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token({'roles': [INTEGRATION_ROLE]})}")
    response = api.post(
        "/api/tenants",
        {"tenant_id": "newco", "name": "NewCo", "realm_name": "newco"},
        format="json",
        HTTP_X_CORRELATION_ID=correlation_id,
    )
    assert response.status_code == 201, response.content
    return response


@pytest.mark.django_db(transaction=True)
def test_an_eager_task_keeps_the_request_id(api, ccp_issuer):
    # Eager mode (tests, GPUAAS_CELERY_EAGER) publishes nothing: the task runs in the request's context.
    assert celery_app.conf.task_always_eager
    load_pool(prefix="corr-vrf", count=2, first_vni=61000, first_vlan=2000)
    before = correlation.peek()
    _onboard(api, ccp_issuer, "eager-task-0001")
    activated = AuditEvent.objects.get(action="tenant.active")
    assert activated.correlation_id == "eager-task-0001"
    assert correlation.peek() == before  # the task handed the context back as it found it


@pytest.fixture
def celery_worker(transactional_db, monkeypatch):
    """A real worker thread consuming from the Redis broker, tasks published for real."""
    monkeypatch.setenv("CELERY_SKIP_CHECKS", "1")
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False

    def close_worker_connections(**kwargs):
        connections.close_all()  # runs in the worker thread: its own connections

    task_postrun.connect(close_worker_connections, weak=False)
    # A message an earlier test's beat or worker left in the queue (resume_onboarding,
    # say) would run first, under its own correlation id, on this test's tenants.
    celery_app.control.purge()
    try:
        with start_worker(
            celery_app, pool="solo", perform_ping_check=False, loglevel="WARNING", shutdown_timeout=30
        ) as worker:
            yield worker
    finally:
        task_postrun.disconnect(close_worker_connections)
        celery_app.conf.task_always_eager = eager


def _wait_for(query, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = query()
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the worker")


def test_a_published_task_carries_the_request_id_as_a_header(celery_worker, api, ccp_issuer):
    load_pool(prefix="corr-vrf", count=2, first_vni=62000, first_vlan=3000)
    _onboard(api, ccp_issuer, "worker-task-0001")

    activated = _wait_for(lambda: AuditEvent.objects.filter(action="tenant.active").first())
    assert activated.correlation_id == "worker-task-0001"
    assert Tenant.objects.get(tenant_id="newco").status == Tenant.Status.ACTIVE


@pytest.fixture
def vrf_pool(transactional_db):
    """VRFs loaded before the worker starts: the resume of waiting tenants that loading
    them publishes is purged with the queue, and cannot provision this test's tenants
    itself, all under its one id."""
    load_pool(prefix="corr-vrf", count=4, first_vni=63000, first_vlan=3500)


def test_tasks_published_outside_a_request_get_ids_of_their_own(vrf_pool, celery_worker):
    # Beat publishes outside any request: each message gets a fresh id, none sticks to the process.
    from apps.tenancy.tasks import provision_tenant

    tenants = [Tenant.objects.create(tenant_id=f"solo-{i}", name="Solo", realm_name="solo") for i in range(2)]
    token = correlation.set(None)
    try:
        for tenant in tenants:
            provision_tenant.delay(str(tenant.pk))
        assert correlation.peek() is None
    finally:
        correlation.reset(token)

    def both_active():
        events = list(AuditEvent.objects.filter(action="tenant.active"))
        return events if len(events) == 2 else None

    events = _wait_for(both_active)
    ids = {event.correlation_id for event in events}
    # Who wrote them, should two share an id: a second worker on this database would show here.
    assert len(ids) == 2, [(e.correlation_id, e.actor, e.actor_type, e.occurred_at) for e in events]
    assert all(VALID.match(value) for value in ids)
