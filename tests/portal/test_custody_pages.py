"""The project's Secrets and Access credentials tabs: project admins add and remove;
values never come back, and a private key is shown once, on the answer to its creation."""

from __future__ import annotations

import pytest

from apps.access.models import AccessCredential, ProjectSecret

pytestmark = pytest.mark.django_db


def test_secrets_tab_adds_lists_by_name_and_removes(as_user, project_admin, project):
    client = as_user(project_admin)
    url = f"/projects/{project.pk}/secrets/"
    page = client.get(url)
    assert page.status_code == 200
    assert "Add or replace a secret" in page.content.decode()

    added = client.post(url, {"name": "hf-token", "value": "hf_portal_value_123"}, follow=True)
    body = added.content.decode()
    assert "hf-token" in body
    assert "hf_portal_value_123" not in body
    assert 'type="password"' in body

    # Under htmx the section comes back alone, and a refused form does not echo the value.
    refused = client.post(url, {"name": "bad name!", "value": "hf_do_not_echo"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400
    assert "hf_do_not_echo" not in refused.content.decode()

    secret = ProjectSecret.objects.get()
    removed = client.post(f"/projects/{project.pk}/secrets/{secret.pk}/remove/", follow=True)
    assert removed.status_code == 200
    assert not ProjectSecret.objects.exists()


def test_a_private_key_is_shown_once_with_a_copy_button(as_user, project_admin, project):
    client = as_user(project_admin)
    url = f"/projects/{project.pk}/access-credentials/"
    created = client.post(url, {"name": "controller"}, HTTP_HX_REQUEST="true")
    assert created.status_code == 201
    body = created.content.decode()
    assert "BEGIN OPENSSH PRIVATE KEY" in body
    assert 'data-copy="issued-private-key"' in body
    assert "no-store" in created["Cache-Control"]
    credential = AccessCredential.objects.get()
    assert credential.fingerprint in body

    again = client.get(url).content.decode()
    assert "PRIVATE KEY" not in again
    assert credential.fingerprint in again

    client.post(f"/projects/{project.pk}/access-credentials/{credential.pk}/remove/")
    assert not AccessCredential.objects.exists()


@pytest.mark.parametrize("path", ["secrets", "access-credentials"])
def test_viewers_and_outsiders_are_refused(as_user, viewer, outsider, project, path):
    assert as_user(viewer).get(f"/projects/{project.pk}/{path}/").status_code == 403
    assert as_user(outsider).get(f"/projects/{project.pk}/{path}/").status_code == 404


def test_the_tabs_show_only_to_those_who_manage_them(as_user, project_admin, viewer, project):
    admin_page = as_user(project_admin).get(f"/projects/{project.pk}/").content.decode()
    assert f"/projects/{project.pk}/secrets/" in admin_page
    assert f"/projects/{project.pk}/access-credentials/" in admin_page
    viewer_page = as_user(viewer).get(f"/projects/{project.pk}/").content.decode()
    assert "/secrets/" not in viewer_page
    assert "/access-credentials/" not in viewer_page
