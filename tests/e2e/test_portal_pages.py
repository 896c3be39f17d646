"""A tenant admin's round trip through the portal pages in a real browser (htmx
on, strict CSP): create a project, add a member, create a service account and
see its secret once, revoke it, with no JavaScript error on the way."""

from __future__ import annotations

import re

from apps.core import crypto
from apps.tenancy.models import Membership, Project, ServiceAccount
from tests.factories import TenantFactory, UserFactory
from tests.support.members import member


def test_tenant_admin_manages_a_project(portal, page):
    tenant = TenantFactory(tenant_id="acme", name="Acme")
    member("tenant_admin", tenant=tenant, username="alice")
    UserFactory(username="bob")
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm asks before removing or revoking

    page.goto(f"{portal.url}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/")

    # New project: htmx posts the form and follows HX-Redirect to the project page.
    page.click("nav.nav >> text=Projects")
    page.click("text=New project")
    page.fill("input[name=name]", "Training")
    page.fill("input[name=project_id]", "bad id")
    page.click("#project-form button[type=submit]")
    page.wait_for_selector("#project-form .field-error")
    page.fill("input[name=project_id]", "training")
    page.click("#project-form button[type=submit]")
    page.wait_for_url(re.compile(r"/projects/[0-9a-f-]{36}/$"))
    project = Project.objects.get(tenant=tenant, project_id="training")
    assert page.url == f"{portal.url}/projects/{project.pk}/"
    assert page.locator("h1").inner_text() == "Training"
    assert "Project Training created." in page.locator("#messages").inner_text()

    # Add a member: the members section is swapped in place.
    page.fill("#members input[name=username]", "bob")
    page.select_option("#members select[name=role]", "viewer")
    page.click("#members button[type=submit]")
    page.wait_for_selector("#members td:has-text('bob')")
    assert "Added bob as Viewer." in page.locator("#messages").inner_text()
    assert Membership.objects.filter(user__username="bob", project=project, role="viewer").exists()

    # Service accounts tab, then create one: the secret is shown once.
    page.click("nav.tabs >> text=Service accounts")
    page.wait_for_url(f"{portal.url}/projects/{project.pk}/service-accounts/")
    page.fill("#service-accounts input[name=name]", "ci-pipeline")
    page.click("#service-accounts button[type=submit]")
    secret = page.locator("#issued-client-secret").inner_text()
    account = ServiceAccount.objects.get(project=project, name="ci-pipeline")
    assert crypto.secret_matches(secret, account.secret_hash)
    assert page.locator("#issued-client-id").inner_text() == account.client_id
    assert "won't be shown again" in page.locator(".secret-panel").inner_text()

    page.reload()
    assert page.locator(".secret-panel").count() == 0
    assert secret not in page.content()
    assert account.client_id in page.content()

    # Revoke, after the confirmation.
    page.click(f"#account-{account.pk} >> text=Revoke")
    page.wait_for_selector(f"#account-{account.pk} .badge:has-text('Revoked')")
    assert not ServiceAccount.objects.get(pk=account.pk).is_active
    assert re.search(r"ci-pipeline revoked", page.locator("#messages").inner_text())

    assert page.js_errors == []
