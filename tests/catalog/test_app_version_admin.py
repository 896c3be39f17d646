"""Publishing app versions in the Django admin: a new version is published through the
service; a published one cannot be edited (a change is a new version); what the
service would refuse is shown on the page, never a 500."""

from __future__ import annotations

import copy
import json

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from apps.catalog import services
from apps.catalog.models import AppVersion
from apps.core.models import AuditEvent
from tests.factories import AppFactory, AppVersionFactory, UserFactory, shipped_manifest

pytestmark = pytest.mark.django_db

ADD_URL = reverse("admin:catalog_appversion_add")


def _change_url(version: AppVersion) -> str:
    return reverse("admin:catalog_appversion_change", args=[version.pk])


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def app(db):
    return AppFactory(slug="jupyterlab", name="JupyterLab")


@pytest.fixture
def operator(db):
    return _signed_in(UserFactory(is_superuser=True, is_staff=True))


@pytest.fixture
def published(app):
    return services.publish_version(None, app, version="1.0.0", manifest=shipped_manifest("jupyterlab"))


def test_an_operator_publishes_a_new_version(operator, app):
    response = operator.post(
        ADD_URL,
        {"app": app.pk, "version": "2.0.0", "manifest": json.dumps(shipped_manifest("jupyterlab"))},
        follow=True,
    )
    assert response.status_code == 200
    version = AppVersion.objects.get(app=app, version="2.0.0")
    assert version.status == "published"
    assert version.artifacts.count() == 1
    assert AuditEvent.objects.filter(action="catalog.publish", target_id=str(version.pk)).exists()


@pytest.mark.parametrize("status", ["published", "deprecated"])
def test_a_published_version_is_shown_read_only_and_saving_it_changes_nothing(operator, published, status):
    AppVersion.objects.filter(pk=published.pk).update(status=status)
    page = operator.get(_change_url(published)).content.decode()
    assert 'name="manifest"' not in page
    assert 'name="version"' not in page
    assert 'name="app"' not in page

    changed = copy.deepcopy(shipped_manifest("jupyterlab"))
    changed["summary"] = "Edited after publishing"
    response = operator.post(
        _change_url(published),
        {"app": published.app_id, "version": "9.9.9", "manifest": json.dumps(changed)},
        follow=True,
    )
    assert response.status_code == 200
    published.refresh_from_db()
    assert (published.version, published.status, published.manifest) == (
        "1.0.0",
        status,
        shipped_manifest("jupyterlab"),
    )
    assert not AppVersion.objects.filter(version="9.9.9").exists()
    assert AuditEvent.objects.filter(action="catalog.publish").count() == 1  # the fixture's only


def test_a_draft_can_still_be_edited_and_is_published_on_save(operator, app):
    draft = AppVersionFactory(app=app, version="3.0.0")
    page = operator.get(_change_url(draft)).content.decode()
    assert 'name="manifest"' in page
    assert 'name="version"' not in page
    edited = copy.deepcopy(shipped_manifest("jupyterlab"))
    edited["summary"] = "Ready"
    response = operator.post(_change_url(draft), {"manifest": json.dumps(edited)}, follow=True)
    assert response.status_code == 200
    draft.refresh_from_db()
    assert draft.status == "published"
    assert draft.manifest["summary"] == "Ready"


def test_adding_a_version_that_exists_is_a_form_error(operator, published):
    changed = copy.deepcopy(shipped_manifest("jupyterlab"))
    changed["summary"] = "Another manifest under the same version"
    response = operator.post(
        ADD_URL, {"app": published.app_id, "version": "1.0.0", "manifest": json.dumps(changed)}
    )
    assert response.status_code == 200
    assert b"already exists" in response.content
    published.refresh_from_db()
    assert published.manifest == shipped_manifest("jupyterlab")


def test_staff_without_a_platform_role_sees_the_refusal_on_the_form(app):
    staff = UserFactory(is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["add_appversion", "change_appversion", "view_appversion"])
    )
    response = _signed_in(staff).post(
        ADD_URL, {"app": app.pk, "version": "2.0.0", "manifest": json.dumps(shipped_manifest("jupyterlab"))}
    )
    assert response.status_code == 200
    assert b"Publishing an app version needs a platform role." in response.content
    assert not AppVersion.objects.exists()
    denial = AuditEvent.objects.get(outcome="denied")
    assert (denial.actor, denial.action) == (staff.username, "catalog.manage")
