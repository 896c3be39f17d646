"""The client secret is shown once: on the page or fragment that answers the
creation, never again on reload, and never in plain text at rest."""

from __future__ import annotations

from django.contrib.sessions.models import Session
from django.urls import reverse

from apps.core import crypto
from apps.core.errors import Conflict, ValidationFailed
from apps.core.models import AuditEvent
from apps.portal.forms import ServiceAccountForm
from apps.tenancy.models import ServiceAccount
from apps.tenancy.principal import for_user
from apps.tenancy.services import create_service_account
from tests.support.pages import HTMX


def _url(project):
    return reverse("project_service_accounts", args=[project.pk])


def _secret_in(body: str, account: ServiceAccount) -> str | None:
    marker = '<code id="issued-client-secret" class="secret">'
    if marker not in body:
        return None
    secret = body.split(marker, 1)[1].split("</code>", 1)[0]
    assert crypto.secret_matches(secret, account.secret_hash)
    return secret


def test_plain_form_shows_the_secret_once_after_the_redirect(project_admin, as_user, project):
    client = as_user(project_admin)
    response = client.post(_url(project), {"name": "ci", "role": "viewer", "limit": ""})
    assert response.status_code == 302
    assert response["Location"] == _url(project)
    account = ServiceAccount.objects.get(project=project, name="ci")

    shown = client.get(response["Location"])
    body = shown.content.decode()
    secret = _secret_in(body, account)
    assert secret
    assert account.client_id in body
    assert "won't be shown again" in body
    assert "no-store" in shown["Cache-Control"]

    reloaded = client.get(response["Location"]).content.decode()
    assert _secret_in(reloaded, account) is None
    assert secret not in reloaded
    assert account.client_id in reloaded  # still listed, without its secret
    assert AuditEvent.objects.filter(action="service_account.create", target_id=str(account.pk)).exists()


def test_the_secret_never_sits_in_the_session_in_plain_text(project_admin, as_user, project):
    client = as_user(project_admin)
    client.post(_url(project), {"name": "ci", "role": "viewer"})
    stored = [s.get_decoded() for s in Session.objects.all()]
    stashed = [d["portal.issued_secret"] for d in stored if "portal.issued_secret" in d]
    assert len(stashed) == 1
    account = ServiceAccount.objects.get(name="ci")
    assert not any(crypto.secret_matches(str(v), account.secret_hash) for v in stashed[0].values())
    client.get(_url(project))
    assert not any("portal.issued_secret" in s.get_decoded() for s in Session.objects.all())


def test_htmx_create_answers_the_section_with_the_secret(project_admin, as_user, project):
    client = as_user(project_admin)
    response = client.post(_url(project), {"name": "ci", "role": "viewer"}, **HTMX)
    body = response.content.decode()
    account = ServiceAccount.objects.get(name="ci")
    assert "<html" not in body
    assert body.lstrip().startswith('<section id="service-accounts"')
    assert _secret_in(body, account)
    assert 'hx-history="false"' in body
    assert "no-store" in response["Cache-Control"]
    # Nothing left over for the next page.
    assert _secret_in(client.get(_url(project)).content.decode(), account) is None


def test_create_form_shows_field_errors(project_admin, as_user, project):
    response = as_user(project_admin).post(_url(project), {"name": "", "role": "owner"}, **HTMX)
    body = response.content.decode()
    assert "This field is required." in body
    assert "Select a valid choice" in body
    assert not ServiceAccount.objects.exists()


def test_a_project_at_its_service_account_cap_says_so_on_the_form(project_admin, as_user, project, settings):
    settings.MAX_SERVICE_ACCOUNTS_PER_PROJECT = 2
    for name in ("ci-1", "ci-2"):
        create_service_account(for_user(project_admin), project, name=name, role="viewer")
    response = as_user(project_admin).post(_url(project), {"name": "ci-3", "role": "viewer"}, **HTMX)
    assert "A project has at most 2 active service accounts; revoke one first." in response.content.decode()
    assert not ServiceAccount.objects.filter(name="ci-3").exists()


def test_service_refusals_land_on_the_form():
    form = ServiceAccountForm({"name": "bot", "role": "project_admin"})
    assert form.is_valid()
    form.add_service_error(ValidationFailed(details={"role": ["You cannot grant a role above your own."]}))
    assert form.errors["role"] == ["You cannot grant a role above your own."]
    form = ServiceAccountForm({"name": "bot", "role": "viewer"})
    form.is_valid()
    form.add_service_error(Conflict("Already there."))
    assert form.non_field_errors() == ["Already there."]


def test_list_shows_active_and_revoked(project_admin, as_user, project):
    principal = for_user(project_admin)
    active = create_service_account(principal, project, name="active-one", role="viewer").account
    gone = create_service_account(principal, project, name="gone-one", role="viewer").account
    ServiceAccount.objects.filter(pk=gone.pk).update(revoked_at="2026-01-01T00:00:00Z")
    body = as_user(project_admin).get(_url(project)).content.decode()
    active_row = body.split(f'id="account-{active.pk}"', 1)[1].split("</tr>", 1)[0]
    gone_row = body.split(f'id="account-{gone.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "badge-ok" in active_row
    assert "Revoke</a>" in active_row
    assert "badge-muted" in gone_row
    assert "Revoked" in gone_row
    assert "Revoke</a>" not in gone_row
    assert body.index("active-one") < body.index("gone-one")


def test_revoke_with_confirmation_without_js(project_admin, as_user, project):
    account = create_service_account(for_user(project_admin), project, name="ci", role="viewer").account
    url = reverse("service_account_revoke", args=[project.pk, account.pk])
    client = as_user(project_admin)
    confirm = client.get(url)
    assert confirm.status_code == 200
    assert b"Revoke ci?" in confirm.content
    assert ServiceAccount.objects.get(pk=account.pk).is_active
    response = client.post(url)
    assert response.status_code == 302
    assert response["Location"] == _url(project)
    assert not ServiceAccount.objects.get(pk=account.pk).is_active
    assert (
        AuditEvent.objects.filter(
            action="service_account.revoke", actor=project_admin.username, target_id=str(account.pk)
        ).count()
        == 1
    )
    # Revoking again changes nothing and writes no second event.
    client.post(url)
    assert AuditEvent.objects.filter(action="service_account.revoke").count() == 1


def test_revoke_with_htmx_answers_the_section(project_admin, as_user, project):
    account = create_service_account(for_user(project_admin), project, name="ci", role="viewer").account
    response = as_user(project_admin).post(
        reverse("service_account_revoke", args=[project.pk, account.pk]), **HTMX
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="service-accounts"')
    row = body.split(f'id="account-{account.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "Revoked" in row
    assert "revoked; its tokens no longer work" in body


def test_secret_hash_is_never_rendered(project_admin, as_user, project):
    account = create_service_account(for_user(project_admin), project, name="ci", role="viewer").account
    body = as_user(project_admin).get(_url(project)).content.decode()
    assert account.secret_hash not in body
