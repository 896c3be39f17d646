"""The audit trail: append-only, and one complete event per privileged action."""

from __future__ import annotations

from uuid import UUID

import pytest
from django.db import DatabaseError, connection, transaction

from apps.core import audit
from apps.core.models import AppendOnlyError, AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.models import Membership, ServiceAccount
from tests.support.members import member
from tests.support.world import INTEGRATION_NAME, INTEGRATION_ROLE

pytestmark = pytest.mark.django_db

CORRELATION = "audit-trail-0001"
SOURCE_IP = "203.0.113.9"


@pytest.fixture
def event(db):
    return audit.record(None, "test.action", target_type="thing", target_id="1")


# --- append-only ------------------------------------------------------------------


def test_saving_an_existing_event_is_refused(event):
    event.action = "rewritten"
    with pytest.raises(AppendOnlyError):
        event.save()
    assert AuditEvent.objects.get(pk=event.pk).action == "test.action"


def test_deleting_an_event_is_refused(event):
    with pytest.raises(AppendOnlyError):
        event.delete()
    assert AuditEvent.objects.filter(pk=event.pk).exists()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE core_auditevent SET action = 'rewritten' WHERE id = %s",
        "UPDATE core_auditevent SET outcome = 'success', actor = 'someone' WHERE id = %s",
        "DELETE FROM core_auditevent WHERE id = %s",
    ],
    ids=["update-action", "update-outcome", "delete"],
)
@pytest.mark.production
def test_the_database_refuses_raw_updates_and_deletes(event, statement):
    assert connection.vendor == "postgresql"
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement, [event.pk])
    fresh = AuditEvent.objects.get(pk=event.pk)
    assert (fresh.action, fresh.actor) == ("test.action", "platform")


@pytest.mark.production
def test_queryset_bulk_update_and_delete_are_refused_too(event):
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(action="rewritten")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    assert AuditEvent.objects.get(pk=event.pk).action == "test.action"


# --- one complete event per privileged action ------------------------------------


def _request(api, method, path, data=None, **extra):
    # Events written while setting up (outside this request) are not the request's.
    _request.since = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    kwargs = {"format": "json"} if data is not None and "content_type" not in extra else {}
    return getattr(api, method)(
        path, data, HTTP_X_CORRELATION_ID=CORRELATION, REMOTE_ADDR=SOURCE_IP, **kwargs, **extra
    )


def _by_project_admin(w, target_type: str, target_id: str) -> dict:
    """The event of w's project admin acting on ``target`` in w's project."""
    return {
        "actor": w["project_admin"].username,
        "actor_type": "user",
        "target_type": target_type,
        "target_id": target_id,
        "tenant_id": w["tenant"].pk,
        "project_id": w["project"].pk,
    }


def _project_create(api, w):
    api.force_login(w["tenant_admin"])
    response = _request(api, "post", "/api/v1/projects", {"project_id": "cell-7", "name": "Cell 7"})
    project = w["tenant"].projects.get(project_id="cell-7")
    return response, {
        "actor": w["tenant_admin"].username,
        "actor_type": "user",
        "target_type": "project",
        "target_id": str(project.pk),
        "tenant_id": w["tenant"].pk,
        "project_id": project.pk,
    }


def _member_add(api, w):
    api.force_login(w["project_admin"])
    colleague = member("viewer", project=w["other_project"])
    response = _request(
        api,
        "post",
        f"/api/v1/projects/{w['project'].pk}/members",
        {"username": colleague.username, "role": "viewer"},
    )
    membership = Membership.objects.get(user=colleague, project=w["project"])
    return response, _by_project_admin(w, "membership", str(membership.pk))


def _member_remove(api, w):
    api.force_login(w["project_admin"])
    membership = Membership.objects.get(user=w["viewer"], project=w["project"])
    response = _request(api, "delete", f"/api/v1/projects/{w['project'].pk}/members/{membership.pk}")
    return response, _by_project_admin(w, "membership", str(membership.pk))


def _service_account_create(api, w):
    api.force_login(w["project_admin"])
    response = _request(
        api, "post", f"/api/v1/projects/{w['project'].pk}/service-accounts", {"name": "ci", "role": "viewer"}
    )
    return response, _by_project_admin(w, "serviceaccount", response.json()["id"])


def _service_account_revoke(api, w):
    account = services.create_service_account(
        principals.for_user(w["project_admin"]), w["project"], name="ci", role="viewer"
    ).account
    api.force_login(w["project_admin"])
    response = _request(api, "delete", f"/api/v1/projects/{w['project'].pk}/service-accounts/{account.pk}")
    return response, _by_project_admin(w, "serviceaccount", str(account.pk))


def _tenant_onboard(api, w):
    token = w["ccp_issuer"].token({"roles": [INTEGRATION_ROLE], "preferred_username": INTEGRATION_NAME})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = _request(
        api, "post", "/api/tenants", {"tenant_id": "newco", "name": "N", "realm_name": "newco"}
    )
    return response, {
        "actor": INTEGRATION_NAME,
        "actor_type": "federated",
        "target_type": "tenant",
        "target_id": response.json()["id"],
        "tenant_id": UUID(response.json()["id"]),
        "project_id": None,
    }


def _ccp_project_create(api, w):
    token = w["ccp_issuer"].token({"roles": [INTEGRATION_ROLE], "preferred_username": INTEGRATION_NAME})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = _request(api, "post", "/api/tenants/acme/projects", {"project_id": "cell-9", "name": "Cell 9"})
    return response, {
        "actor": INTEGRATION_NAME,
        "actor_type": "federated",
        "target_type": "project",
        "target_id": response.json()["id"],
        "tenant_id": w["tenant"].pk,
        "project_id": UUID(response.json()["id"]),
    }


def _denied_by_role(api, w):
    api.force_login(w["viewer"])
    response = _request(
        api, "post", f"/api/v1/projects/{w['project'].pk}/service-accounts", {"name": "ci", "role": "viewer"}
    )
    return response, {
        "actor": w["viewer"].username,
        "actor_type": "user",
        "target_type": "project",
        "target_id": str(w["project"].pk),
        "tenant_id": w["tenant"].pk,
        "project_id": w["project"].pk,
        "outcome": "denied",
    }


def _denied_out_of_scope(api, w):
    api.force_login(w["other_tenant_admin"])
    response = _request(api, "get", f"/api/v1/projects/{w['project'].pk}")
    return response, {
        "actor": w["other_tenant_admin"].username,
        "actor_type": "user",
        "target_type": "project",
        "target_id": str(w["project"].pk),
        "outcome": "denied",
    }


# Refused token requests are audited as counts per minute instead (decision 0031;
# tests/core/test_denied_requests_are_summarised.py).
ACTIONS = [
    ("project.create", _project_create, 201),
    ("member.add", _member_add, 201),
    ("member.remove", _member_remove, 204),
    ("service_account.create", _service_account_create, 201),
    ("service_account.revoke", _service_account_revoke, 204),
    ("tenant.onboard", _tenant_onboard, 201),
    ("project.create", _ccp_project_create, 201),
    ("service_account.manage", _denied_by_role, 403),
    ("project.view", _denied_out_of_scope, 404),
]


@pytest.fixture
def w(tenant, project, other_project, other_tenant_project, tenant_admin, project_admin, viewer, ccp_issuer):
    return {
        "tenant": tenant,
        "project": project,
        "other_project": other_project,
        "tenant_admin": tenant_admin,
        "project_admin": project_admin,
        "viewer": viewer,
        "ccp_issuer": ccp_issuer,
        "other_tenant_admin": member("tenant_admin", tenant=other_tenant_project.tenant),
    }


@pytest.mark.parametrize(
    ("action", "perform", "status"), ACTIONS, ids=[a[1].__name__.strip("_") for a in ACTIONS]
)
def test_each_privileged_action_writes_one_complete_event(api, w, action, perform, status):
    response, expected = perform(api, w)
    last = _request.since
    assert response.status_code == status, response.content
    assert response["X-Correlation-ID"] == CORRELATION

    (event,) = AuditEvent.objects.filter(id__gt=last, action=action)
    expected = {"outcome": "success", "tenant_id": None, "project_id": None, **expected}
    actual = {field: getattr(event, field) for field in expected}
    assert actual == expected
    assert event.correlation_id == CORRELATION
    assert event.source_ip == SOURCE_IP
    assert event.occurred_at is not None
    # Nothing else was written under another correlation id by this request.
    assert set(AuditEvent.objects.filter(id__gt=last).values_list("correlation_id", flat=True)) == {
        CORRELATION
    }


def test_events_outside_a_request_name_the_platform_and_get_their_own_correlation_id(tenant, tenant_admin):
    membership = services.grant_tenant_role(
        principals.for_user(tenant_admin), tenant, user=member("viewer", tenant=tenant), role="billing_admin"
    )
    event = AuditEvent.objects.get(action="member.add", target_id=str(membership.pk))
    assert (event.actor, event.actor_type, event.tenant_id) == (tenant_admin.username, "user", tenant.pk)
    assert event.correlation_id
    assert event.source_ip is None

    issued = services.create_platform_service_account(None, name="ccp", role="platform_integration")
    created = AuditEvent.objects.get(action="service_account.create", target_id=str(issued.account.pk))
    assert (created.actor, created.actor_type, created.tenant_id) == ("platform", "system", None)
    assert created.details == {"client_id": issued.account.client_id, "role": "platform_integration"}
    assert "secret" not in str(created.details).replace("client_id", "")


def test_audit_details_never_hold_secrets(api, project, project_admin):
    api.force_login(project_admin)
    body = api.post(
        f"/api/v1/projects/{project.pk}/service-accounts", {"name": "ci", "role": "viewer"}, format="json"
    ).json()
    account = ServiceAccount.objects.get(pk=body["id"])
    for event in AuditEvent.objects.all():
        dumped = str(event.details) + event.target_id
        assert body["client_secret"] not in dumped
        assert account.secret_hash not in dumped
