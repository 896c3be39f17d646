"""Users and groups edited in the Django admin leave platform audit events naming the
operator, as every other admin edit does: creating a user, setting a password, making
someone a superuser (a platform admin), editing a group's permissions. The events say
what changed, never a password or its hash."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()
NEW_PASSWORD = "Correct-Horse-4711"


@pytest.fixture
def operator(platform_admin):
    client = Client()
    client.force_login(platform_admin)
    return client


def only_event(action: str) -> AuditEvent:
    (event,) = AuditEvent.objects.filter(action=action)
    return event


def assert_no_secret(event: AuditEvent, user) -> None:
    written = json.dumps(event.details)
    assert NEW_PASSWORD not in written
    assert user.password not in written  # the stored hash


def test_creating_a_user_is_audited(operator, platform_admin):
    response = operator.post(
        reverse("admin:auth_user_add"),
        {
            "username": "carol",
            "usable_password": "true",
            "password1": NEW_PASSWORD,
            "password2": NEW_PASSWORD,
        },
    )

    assert response.status_code == 302, response.content
    carol = User.objects.get(username="carol")
    event = only_event("admin.user.add")
    assert (event.actor, event.target_type, event.target_id) == (
        platform_admin.username,
        "user",
        str(carol.pk),
    )
    assert event.correlation_id
    assert_no_secret(event, carol)


def test_making_a_user_superuser_is_audited_and_makes_them_platform_admin(operator, platform_admin):
    dave = UserFactory(username="dave")
    response = operator.post(
        reverse("admin:auth_user_change", args=[dave.pk]),
        {
            "username": "dave",
            "is_active": "on",
            "is_superuser": "on",
            "date_joined_0": "2025-01-01",
            "date_joined_1": "00:00:00",
        },
    )

    assert response.status_code == 302, response.content
    dave.refresh_from_db()
    assert principals.for_user(dave).is_platform_admin
    event = only_event("admin.user.change")
    assert (event.actor, event.target_id) == (platform_admin.username, str(dave.pk))
    assert "Superuser status" in event.details["changes"][0]["changed"]["fields"]
    assert_no_secret(event, dave)


def test_setting_a_password_is_audited_without_the_password(operator, platform_admin):
    erin = UserFactory(username="erin")
    response = operator.post(
        reverse("admin:auth_user_password_change", args=[erin.pk]),
        {"usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )

    assert response.status_code == 302, response.content
    erin.refresh_from_db()
    assert erin.check_password(NEW_PASSWORD)
    event = only_event("admin.user.change")
    assert (event.actor, event.target_id) == (platform_admin.username, str(erin.pk))
    assert_no_secret(event, erin)


def test_deleting_a_user_is_audited(operator, platform_admin):
    frank = UserFactory(username="frank")
    response = operator.post(reverse("admin:auth_user_delete", args=[frank.pk]), {"post": "yes"})

    assert response.status_code == 302, response.content
    assert not User.objects.filter(pk=frank.pk).exists()
    event = only_event("admin.user.delete")
    assert (event.actor, event.target_id, event.details) == (
        platform_admin.username,
        str(frank.pk),
        {"object": "frank"},
    )


def test_group_permissions_are_audited(operator, platform_admin):
    permission = Permission.objects.get(codename="change_node")
    response = operator.post(
        reverse("admin:auth_group_add"), {"name": "fleet operators", "permissions": [permission.pk]}
    )

    assert response.status_code == 302, response.content
    group = Group.objects.get(name="fleet operators")
    event = only_event("admin.group.add")
    assert (event.actor, event.target_type, event.target_id) == (
        platform_admin.username,
        "group",
        str(group.pk),
    )
