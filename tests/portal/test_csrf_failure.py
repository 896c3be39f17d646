"""A stale CSRF token gets a portal page that says to reload, not the role message."""

from __future__ import annotations

import re

import pytest
from django.middleware.csrf import get_token
from django.test import Client, RequestFactory
from django.urls import reverse

from tests.support.pages import HTMX

pytestmark = pytest.mark.django_db


def stale_token() -> str:
    """A well-formed token for another secret, as sent by a tab opened before signing in again."""
    return get_token(RequestFactory().get("/"))


def strict_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get(reverse("dashboard"))  # sets the CSRF cookie, as a browser tab would
    assert page.status_code == 200
    assert "csrftoken" in client.cookies
    return client


def test_form_post_with_stale_token_gets_portal_page(tenant_admin, project):
    client = strict_client(tenant_admin)
    token = stale_token()
    response = client.post(
        reverse("switch_project"), {"project": str(project.pk), "csrfmiddlewaretoken": token}
    )
    body = response.content.decode()
    assert response.status_code == 403
    assert response["X-CSRF-Failure"] == "1"
    assert body.startswith("<!doctype html>")
    assert 'class="topbar"' in body
    assert "This page is out of date" in body
    assert "reload the page" in body
    assert "Your role does not allow" not in body
    assert "CSRF verification failed" not in body
    assert token not in body


def test_htmx_post_with_stale_token_is_marked(tenant_admin, project):
    client = strict_client(tenant_admin)
    token = stale_token()
    response = client.post(reverse("project_create"), {"name": "x"}, HTTP_X_CSRFTOKEN=token, **HTMX)
    assert response.status_code == 403
    assert response["X-CSRF-Failure"] == "1"
    assert token not in response.content.decode()


def test_missing_cookie_is_marked_too(tenant_admin, project):
    client = Client(enforce_csrf_checks=True)
    client.force_login(tenant_admin)
    response = client.post(reverse("switch_project"), {"project": str(project.pk)}, **HTMX)
    assert response.status_code == 403
    assert response["X-CSRF-Failure"] == "1"


def test_current_token_still_works(tenant_admin, project):
    client = strict_client(tenant_admin)
    page = client.get(reverse("dashboard")).content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)
    response = client.post(
        reverse("switch_project"), {"project": str(project.pk)}, HTTP_X_CSRFTOKEN=token, **HTMX
    )
    assert response.status_code == 302
    assert "X-CSRF-Failure" not in response


def test_role_refusal_is_not_marked(outsider, project):
    client = Client()
    client.force_login(outsider)
    response = client.post(reverse("switch_project"), {"project": str(project.pk)}, **HTMX)
    assert response.status_code in (403, 404)
    assert "X-CSRF-Failure" not in response
