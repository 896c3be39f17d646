"""The operators' Django admin: every model renders, no secret is shown, the
revoke action goes through the service (and so is audited), records are read-only."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from apps.core import audit
from apps.core.models import AuditEvent, IdempotencyRecord
from apps.core.secrets import store
from apps.tenancy.models import ExternalIdentity, Membership, Quota, ServiceAccount, SigningKey
from apps.tenancy.principal import for_user
from apps.tenancy.services import create_platform_service_account, create_service_account
from tests.factories import UserFactory

MODELS = [
    "tenancy.tenant",
    "tenancy.project",
    "tenancy.membership",
    "tenancy.serviceaccount",
    "tenancy.externalidentity",
    "tenancy.signingkey",
    "core.auditevent",
    "core.idempotencyrecord",
    "tenancy.quota",
    "access.accesscredential",
    "access.projectsecret",
    "metering.rate",
    "metering.billingexport",
    "metering.billingadjustment",
    "metering.quotacrossing",
    "storage.tenantstorage",
]


@pytest.fixture
def operator(platform_admin, as_user):
    return as_user(platform_admin)


@pytest.fixture
def account(project, project_admin):
    return create_service_account(for_user(project_admin), project, name="ci-bot", role="viewer").account


@pytest.fixture
def world(project, tenant_admin, account, platform_admin):
    Quota.objects.create(tenant=project.tenant, resource="gpus", limit=64)
    ExternalIdentity.objects.create(
        user=tenant_admin, issuer="https://kc.example/realms/acme", subject="sub-1"
    )
    store().write(SigningKey.path_for("k1"), "PRIVATE-KEY-MATERIAL")
    SigningKey.objects.create(
        kid="k1", secret_path=SigningKey.path_for("k1"), public_jwk={"kty": "RSA", "kid": "k1"}
    )
    IdempotencyRecord.objects.create(
        principal="user:1",
        key="k",
        request_hash="h",
        response_status=201,
        response_body={"client_secret": "IDEMPOTENT-SECRET"},
    )
    audit.record(for_user(platform_admin), "test.event", target=project)


def _admin_url(model: str, view: str = "changelist", *args) -> str:
    app, name = model.split(".")
    return reverse(f"admin:{app}_{name}_{view}", args=args)


@pytest.mark.parametrize("model", MODELS)
def test_changelists_render(model, operator, world):
    response = operator.get(_admin_url(model))
    assert response.status_code == 200


def test_change_pages_render_without_secrets(operator, world, account, project):
    pages = {
        _admin_url("tenancy.tenant", "change", project.tenant.pk): [],
        _admin_url("tenancy.project", "change", project.pk): [],
        _admin_url("tenancy.serviceaccount", "change", account.pk): [account.secret_hash],
        _admin_url("tenancy.signingkey", "change", SigningKey.objects.get().pk): ["PRIVATE-KEY-MATERIAL"],
        _admin_url("core.idempotencyrecord", "change", IdempotencyRecord.objects.get().pk): [
            "IDEMPOTENT-SECRET"
        ],
        _admin_url("core.auditevent", "change", AuditEvent.objects.first().pk): [],
    }
    for url, secrets in pages.items():
        response = operator.get(url)
        assert response.status_code == 200, url
        for secret in secrets:
            assert secret.encode() not in response.content, url
    for url in (
        _admin_url("tenancy.serviceaccount"),
        _admin_url("tenancy.signingkey"),
        _admin_url("core.idempotencyrecord"),
    ):
        body = operator.get(url).content
        assert account.secret_hash.encode() not in body
        assert b"PRIVATE-KEY-MATERIAL" not in body
        assert b"IDEMPOTENT-SECRET" not in body


def test_tenant_page_has_project_and_quota_inlines(operator, world, project):
    body = operator.get(_admin_url("tenancy.tenant", "change", project.tenant.pk)).content.decode()
    assert "cell-1" in body
    assert 'name="quotas-0-limit"' in body
    assert 'value="64"' in body


def test_revoke_action_revokes_through_the_service_and_audits(operator, platform_admin, account, project):
    platform_account = create_platform_service_account(None, name="ccp", role="platform_integration").account
    response = operator.post(
        _admin_url("tenancy.serviceaccount"),
        {
            "action": "revoke",
            "_selected_action": [str(account.pk), str(platform_account.pk)],
        },
        follow=True,
    )
    assert response.status_code == 200
    assert b"Revoked 2: " in response.content
    assert not ServiceAccount.objects.get(pk=account.pk).is_active
    assert not ServiceAccount.objects.get(pk=platform_account.pk).is_active
    events = AuditEvent.objects.filter(action="service_account.revoke", actor=platform_admin.username)
    assert {e.target_id for e in events} == {str(account.pk), str(platform_account.pk)}
    assert events.get(target_id=str(account.pk)).project_id == project.pk


def test_revoke_action_skips_revoked_accounts(operator, account):
    ServiceAccount.objects.filter(pk=account.pk).update(revoked_at="2026-01-01T00:00:00Z")
    response = operator.post(
        _admin_url("tenancy.serviceaccount"),
        {"action": "revoke", "_selected_action": [str(account.pk)]},
        follow=True,
    )
    assert b"Already revoked: ci-bot." in response.content
    assert not AuditEvent.objects.filter(action="service_account.revoke").exists()


def test_staff_without_a_platform_role_is_refused_and_the_refusal_audited(as_user, account):
    staff = UserFactory(is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_serviceaccount", "change_serviceaccount"])
    )
    response = as_user(staff).post(
        _admin_url("tenancy.serviceaccount"),
        {"action": "revoke", "_selected_action": [str(account.pk)]},
        follow=True,
    )
    assert b"Refused for ci-bot: " in response.content
    assert ServiceAccount.objects.get(pk=account.pk).is_active
    assert AuditEvent.objects.filter(actor=staff.username, outcome="denied").exists()


def test_service_accounts_cannot_be_added_changed_or_deleted_in_admin(operator, account):
    assert operator.get(_admin_url("tenancy.serviceaccount", "add")).status_code == 403
    body = operator.get(_admin_url("tenancy.serviceaccount")).content.decode()
    assert 'value="delete_selected"' not in body
    assert (
        operator.post(_admin_url("tenancy.serviceaccount", "change", account.pk), {"name": "x"}).status_code
        == 403
    )


def test_audit_events_are_read_only(operator, world):
    event = AuditEvent.objects.first()
    assert operator.get(_admin_url("core.auditevent", "add")).status_code == 403
    assert operator.get(_admin_url("core.auditevent", "delete", event.pk)).status_code == 403
    body = operator.get(_admin_url("core.auditevent")).content.decode()
    assert 'value="delete_selected"' not in body


def test_audit_admin_filters_and_searches(operator, world, project):
    correlation = AuditEvent.objects.get(action="test.event").correlation_id
    assert operator.get(_admin_url("core.auditevent") + "?outcome__exact=denied").status_code == 200
    assert "test.event" in _results(operator.get(_admin_url("core.auditevent") + f"?q={correlation}"))
    assert "test.event" not in _results(
        operator.get(_admin_url("core.auditevent") + "?q=no-such-correlation")
    )
    assert "test.event" not in _results(
        operator.get(_admin_url("core.auditevent") + "?actor_type__exact=system")
    )
    assert "test.event" in _results(operator.get(_admin_url("core.auditevent") + "?action=test.event"))


def test_audit_admin_lists_its_filters_without_scanning_the_trail_each_page(operator, world):
    url = _admin_url("core.auditevent")
    operator.get(url)
    audit.record(None, "test.newer")
    with CaptureQueriesContext(connection) as queries:
        body = operator.get(url).content.decode()
    sidebar = body.split('id="changelist-filter"', 1)[1]
    # The action and actor-type lists as the first page found them, for a few minutes.
    assert "?action=test.event" in sidebar
    assert "test.newer" not in sidebar
    assert "?actor_type=user" in sidebar
    assert "Past 7 days" in sidebar
    assert not [q["sql"] for q in queries.captured_queries if "DISTINCT" in q["sql"]]
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    today = _results(operator.get(url + "?" + urlencode({"occurred_at__gte": midnight.isoformat()})))
    assert "test.newer" in today


def _results(response) -> str:
    """The change list's result table (the filter sidebar names actions too)."""
    body = response.content.decode()
    if 'id="result_list"' not in body:
        return ""
    return body.split('id="result_list"', 1)[1].split("</table>", 1)[0]


def test_admin_edits_are_audited(operator, platform_admin, project):
    membership = Membership.objects.create(
        user=UserFactory(), tenant=project.tenant, project=project, role="viewer"
    )
    response = operator.post(
        _admin_url("tenancy.membership", "change", membership.pk),
        {
            "user": membership.user.pk,
            "role": "project_admin",
            "limit": "",
            "tenant": project.tenant.pk,
            "project": project.pk,
        },
    )
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="admin.membership.change")
    assert event.actor == platform_admin.username
    assert event.outcome == "success"
    assert event.project_id == project.pk


def test_tenants_are_not_added_in_admin(operator, db):
    assert operator.get(_admin_url("tenancy.tenant", "add")).status_code == 403
