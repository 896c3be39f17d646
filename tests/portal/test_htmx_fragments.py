"""The same URL answers a full page to a browser and a fragment to htmx."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.support.pages import HTMX


@pytest.mark.parametrize(
    ("name", "fragment_start"),
    [
        ("project_detail", '<nav class="tabs"'),
        ("project_members", '<nav class="tabs"'),
        ("project_service_accounts", '<nav class="tabs"'),
    ],
)
def test_project_tabs(name, fragment_start, tenant_admin, as_user, project):
    client = as_user(tenant_admin)
    url = reverse(name, args=[project.pk])
    page = client.get(url)
    fragment = client.get(url, **HTMX)
    assert page.content.decode().startswith("<!doctype html>")
    body = fragment.content.decode()
    assert "<html" not in body
    assert "<header" not in body
    assert body.lstrip().startswith(fragment_start)
    assert "HX-Request" in fragment["Vary"]
    assert "HX-Request" in page["Vary"]


def test_audit_results_fragment(tenant_admin, as_user, project):
    client = as_user(tenant_admin)
    assert client.get(reverse("audit_log")).content.decode().startswith("<!doctype html>")
    fragment = client.get(reverse("audit_log") + "?outcome=success", **HTMX).content.decode()
    assert "<html" not in fragment
    assert 'class="card filters"' not in fragment
    assert 'class="card table-card"' in fragment


def test_boosted_and_history_restore_requests_get_full_pages(tenant_admin, as_user, project):
    client = as_user(tenant_admin)
    url = reverse("project_members", args=[project.pk])
    boosted = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_BOOSTED="true")
    restore = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert boosted.content.decode().startswith("<!doctype html>")
    assert restore.content.decode().startswith("<!doctype html>")


def test_pages_carry_the_csrf_header_for_htmx_and_no_inline_script_or_style(tenant_admin, as_user, project):
    body = as_user(tenant_admin).get(reverse("project_members", args=[project.pk])).content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in body
    assert "<script>" not in body
    assert " style=" not in body
    assert " onclick=" not in body
    assert '<script src="/static/js/portal.js" defer></script>' in body
