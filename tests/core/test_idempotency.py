"""``Idempotency-Key`` on creating POSTs (CONTRACT.md, Conventions)."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory, force_authenticate

from apps.core import idempotency
from apps.core.errors import RateLimited, Unavailable
from apps.core.idempotency import idempotent
from apps.core.models import AuditEvent, IdempotencyRecord
from apps.core.tasks import purge_idempotency_records
from apps.tenancy import principal as principals
from apps.tenancy.api.base import BaseAPIView
from apps.tenancy.models import Project, ServiceAccount, Tenant
from tests.factories import ProjectFactory, TenantFactory
from tests.support.concurrency import at_once
from tests.support.members import member
from tests.support.world import INTEGRATION_ROLE

BODY = {"project_id": "cell-7", "name": "Cell 7"}


def post_project(api, key, body=None):
    return api.post("/api/v1/projects", body or BODY, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.django_db
def test_same_key_and_body_replays_the_first_response_without_redoing_the_work(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    first = post_project(api, "create-cell-7")
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first
    events = AuditEvent.objects.count()

    second = post_project(api, "create-cell-7")
    assert second.status_code == 201
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Project.objects.filter(project_id="cell-7").count() == 1
    assert AuditEvent.objects.count() == events  # nothing done, nothing audited
    assert IdempotencyRecord.objects.count() == 1


@pytest.mark.django_db
def test_same_key_with_another_body_is_an_idempotency_conflict(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    assert post_project(api, "k-1").status_code == 201
    response = post_project(api, "k-1", {"project_id": "cell-8", "name": "Cell 8"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"
    assert not Project.objects.filter(project_id="cell-8").exists()


@pytest.mark.django_db
def test_same_key_on_another_path_is_an_idempotency_conflict(api, project, tenant_admin):
    api.force_login(tenant_admin)
    assert post_project(api, "k-1").status_code == 201
    response = api.post(
        f"/api/v1/projects/{project.pk}/service-accounts", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"


@pytest.mark.django_db
def test_keys_are_per_principal(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    assert post_project(api, "shared-key").status_code == 201
    colleague = APIClient()
    colleague.force_login(member("tenant_admin", tenant=tenant))
    # Same key and body from someone else is a request of its own: the project exists, so 200.
    theirs = post_project(colleague, "shared-key")
    assert theirs.status_code == 200
    assert "Idempotent-Replayed" not in theirs
    # ... and a different body under the same key is no conflict for them either.
    other = post_project(colleague, "shared-key-2", {"project_id": "cell-8", "name": "Cell 8"})
    assert other.status_code == 201
    assert post_project(APIClient(), "shared-key").status_code == 401  # and anonymous callers get nothing
    assert IdempotencyRecord.objects.values("principal").distinct().count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "bad\x01key", "tab\tkey", "trailing-newline\n", "del\x7f", "ключ"],
    ids=["empty", "too-long", "control-char", "tab", "trailing-newline", "delete", "non-ascii"],
)
def test_invalid_keys_are_refused(api, tenant, tenant_admin, key):
    api.force_login(tenant_admin)
    response = post_project(api, key)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "Idempotency-Key" in error["details"]
    assert not Project.objects.filter(project_id="cell-7").exists()
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["k", "x" * 255, "printable ~!@#$%^&*()_+{}|:<>?"])
def test_valid_keys_are_accepted(api, tenant, tenant_admin, key):
    api.force_login(tenant_admin)
    assert post_project(api, key).status_code == 201
    assert post_project(api, key)["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_validation_errors_are_replayed(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    bad = {"project_id": "no spaces allowed", "name": "X"}
    first = post_project(api, "k-bad", bad)
    assert first.status_code == 400
    second = post_project(api, "k-bad", bad)
    assert second.status_code == 400
    assert second["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    # The key is spent on that request: a corrected body needs a new key.
    assert post_project(api, "k-bad").status_code == 409


@pytest.mark.django_db
def test_a_refusal_is_replayed_and_audited_once(api, project, viewer):
    api.force_login(viewer)
    url = f"/api/v1/projects/{project.pk}/service-accounts"
    first = api.post(url, {"name": "ci", "role": "viewer"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert first.status_code == 403
    second = api.post(url, {"name": "ci", "role": "viewer"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert second.status_code == 403
    assert second["Idempotent-Replayed"] == "true"
    assert AuditEvent.objects.filter(outcome="denied").count() == 1


@pytest.mark.django_db
def test_a_replayed_service_account_secret_is_not_stored_in_the_clear(api, project, project_admin):
    api.force_login(project_admin)
    url = f"/api/v1/projects/{project.pk}/service-accounts"
    first = api.post(url, {"name": "ci", "role": "viewer"}, format="json", HTTP_IDEMPOTENCY_KEY="sa-1")
    secret = first.json()["client_secret"]
    stored = IdempotencyRecord.objects.get()
    assert secret not in str(stored.response_body)
    replayed = api.post(url, {"name": "ci", "role": "viewer"}, format="json", HTTP_IDEMPOTENCY_KEY="sa-1")
    assert replayed.json()["client_secret"] == secret
    assert replayed.json() == first.json()


@pytest.mark.django_db
def test_onboarding_with_a_key_onboards_once(api, ccp_issuer, django_capture_on_commit_callbacks):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token({'roles': [INTEGRATION_ROLE]})}")
    body = {"tenant_id": "newco", "name": "NewCo", "realm_name": "newco"}
    with django_capture_on_commit_callbacks() as callbacks:
        first = api.post("/api/tenants", body, format="json", HTTP_IDEMPOTENCY_KEY="onboard-newco")
        second = api.post("/api/tenants", body, format="json", HTTP_IDEMPOTENCY_KEY="onboard-newco")
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Tenant.objects.filter(tenant_id="newco").count() == 1
    assert len(callbacks) == 1  # provisioning enqueued once


# --- transient answers are not remembered --------------------------------------


class FlakyView(BaseAPIView):
    """A creating POST whose first answers are transient failures."""

    answers: ClassVar[list] = []  # what each call answers, shared by the view's instances
    calls = 0

    @idempotent
    def post(self, request):
        type(self).calls += 1
        answer = type(self).answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer < 300:
            ProjectFactory(
                tenant=Tenant.objects.get(tenant_id="acme"), project_id=f"flaky-{type(self).calls}"
            )
        return Response({"status": answer}, status=answer)


@pytest.fixture
def flaky(tenant, tenant_admin):
    factory = APIRequestFactory()
    principal = principals.for_user(tenant_admin)

    def call(answer):
        FlakyView.answers = [answer]
        request = factory.post("/api/v1/flaky", {"a": 1}, format="json", HTTP_IDEMPOTENCY_KEY="flaky-key")
        force_authenticate(request, user=tenant_admin, token=principal)
        return FlakyView.as_view()(request)

    FlakyView.calls = 0
    return call


@pytest.mark.django_db
@pytest.mark.parametrize(
    "transient",
    [429, 500, 502, 503, RateLimited(retry_after=5), Unavailable(retry_after=30)],
    ids=["429", "500", "502", "503", "raised-429", "raised-503"],
)
def test_transient_answers_are_not_stored(flaky, transient):
    failed = flaky(transient)
    assert failed.status_code in (429, 500, 502, 503)
    assert "Idempotent-Replayed" not in failed
    assert not IdempotencyRecord.objects.exists()

    retried = flaky(201)
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried
    assert flaky(201)["Idempotent-Replayed"] == "true"
    assert FlakyView.calls == 2
    assert Project.objects.filter(project_id__startswith="flaky-").count() == 1


@pytest.mark.django_db
def test_a_crash_rolls_back_the_key_with_the_work(flaky):
    with pytest.raises(RuntimeError):
        flaky(RuntimeError("boom"))
    assert not IdempotencyRecord.objects.exists()
    assert flaky(201).status_code == 201


@pytest.mark.django_db
def test_a_throttled_request_is_not_stored_and_may_be_retried(api, tenant, tenant_admin, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"principal": "1/min"}}
    api.force_login(tenant_admin)
    assert api.get("/api/v1/projects").status_code == 200  # spends the minute's only request
    throttled = post_project(api, "k-throttled")
    assert throttled.status_code == 429
    assert throttled["Retry-After"]
    assert not IdempotencyRecord.objects.exists()
    cache.clear()  # the next window
    assert post_project(api, "k-throttled").status_code == 201


# --- concurrent duplicates --------------------------------------------------------


def _signed_in_clients(user, count):
    clients = []
    for _ in range(count):
        client = APIClient()
        client.force_login(user)
        clients.append(client)
    return clients


@pytest.mark.django_db(transaction=True)
@pytest.mark.production
def test_concurrent_duplicates_create_one_service_account_and_answer_alike():
    project = ProjectFactory(tenant=TenantFactory(tenant_id="acme"), project_id="cell-1")
    admin = member("project_admin", project=project)
    url = f"/api/v1/projects/{project.pk}/service-accounts"
    clients = _signed_in_clients(admin, 8)

    responses = at_once(
        [
            lambda c=c: c.post(
                url, {"name": "ci", "role": "viewer"}, format="json", HTTP_IDEMPOTENCY_KEY="sa-ci"
            )
            for c in clients
        ]
    )

    assert ServiceAccount.objects.filter(project=project).count() == 1
    assert {r.status_code for r in responses} == {201}
    assert all(r.json() == responses[0].json() for r in responses)
    assert responses[0].json()["client_secret"]
    assert sum(1 for r in responses if "Idempotent-Replayed" not in r) == 1
    assert AuditEvent.objects.filter(action="service_account.create").count() == 1
    assert IdempotencyRecord.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.production
def test_concurrent_duplicates_create_one_project_and_answer_alike():
    tenant = TenantFactory(tenant_id="acme")
    admin = member("tenant_admin", tenant=tenant)
    clients = _signed_in_clients(admin, 8)

    responses = at_once([lambda c=c: post_project(c, "new-cell") for c in clients])

    assert Project.objects.filter(tenant=tenant, project_id="cell-7").count() == 1
    assert {r.status_code for r in responses} == {201}
    assert all(r.json() == responses[0].json() for r in responses)
    assert AuditEvent.objects.filter(action="project.create").count() == 1


# --- retention -------------------------------------------------------------------


@pytest.mark.django_db
def test_records_older_than_the_retention_are_purged():
    assert timedelta(hours=24) <= idempotency.RETENTION  # CONTRACT: kept at least 24 hours
    now = timezone.now()
    ages = {
        "fresh": timedelta(0),
        "a-day": timedelta(hours=25),
        "almost": idempotency.RETENTION - timedelta(minutes=5),
        "expired": idempotency.RETENTION + timedelta(minutes=5),
        "ancient": timedelta(days=30),
    }
    for key, age in ages.items():
        record = IdempotencyRecord.objects.create(
            principal="user:1", key=key, request_hash="h", response_status=201
        )
        IdempotencyRecord.objects.filter(pk=record.pk).update(created_at=now - age)

    assert idempotency.purge_expired() == 2
    assert set(IdempotencyRecord.objects.values_list("key", flat=True)) == {"fresh", "a-day", "almost"}
    assert purge_idempotency_records.delay().get() == 0  # the periodic task, run eagerly


@pytest.mark.django_db
def test_a_purged_key_may_be_used_again(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    assert post_project(api, "reused").status_code == 201
    IdempotencyRecord.objects.update(created_at=timezone.now() - idempotency.RETENTION - timedelta(hours=1))
    idempotency.purge_expired()
    again = post_project(api, "reused", {"project_id": "cell-8", "name": "Cell 8"})
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again
