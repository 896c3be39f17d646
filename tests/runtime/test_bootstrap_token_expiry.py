"""Bootstrap tokens expire: 24 hours by default, set per node; an expired token is
refused with a clear error, and the admin shows when a token expires."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.allocations import nodes
from apps.allocations.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(flavor):
    return Node.objects.create(hostname="gpu-late", flavor=flavor)


def enroll(api, token: str):
    return api.post("/api/agent/v1/enroll", {"hostname": "gpu-late", "bootstrap_token": token}, format="json")


def age(node: Node, by: timedelta) -> None:
    """Let time pass for the token: its expiry moves into the past by ``by``."""
    Node.objects.filter(pk=node.pk).update(bootstrap_token_expires_at=timezone.now() - by)


def test_a_token_lasts_24_hours_by_default(node):
    nodes.issue_bootstrap_token(node)
    node.refresh_from_db()
    lifetime = node.bootstrap_token_expires_at - timezone.now()
    assert timedelta(hours=23, minutes=59) < lifetime <= timedelta(hours=24)


def test_the_lifetime_is_set_per_node(node):
    Node.objects.filter(pk=node.pk).update(bootstrap_token_hours=2)
    node.refresh_from_db()
    nodes.issue_bootstrap_token(node)
    node.refresh_from_db()
    assert node.bootstrap_token_expires_at - timezone.now() <= timedelta(hours=2)


def test_an_expired_token_is_refused_with_a_clear_error(api, node):
    token = nodes.issue_bootstrap_token(node)
    age(node, timedelta(seconds=1))
    response = enroll(api, token)
    assert response.status_code == 401, response.content
    error = response.json()["error"]
    assert error["code"] == "unauthenticated"
    assert "expired" in error["message"]
    assert "issue a new one" in error["message"]
    node.refresh_from_db()
    assert not node.credential_hash
    assert node.enrolled_at is None


def test_an_unexpired_token_enrolls(api, node):
    token = nodes.issue_bootstrap_token(node)
    assert enroll(api, token).status_code == 201


def test_the_admin_shows_the_expiry(node, platform_admin):
    operator = Client()
    operator.force_login(platform_admin)
    page = reverse("admin:allocations_node_change", args=[node.pk])
    nodes.issue_bootstrap_token(node)
    node.refresh_from_db()
    shown = operator.get(page).content.decode()
    assert f"expires {node.bootstrap_token_expires_at:%Y-%m-%d %H:%M} UTC" in shown
    assert "bootstrap token lifetime (hours)" in shown.lower()
    age(node, timedelta(hours=1))
    assert "bootstrap token expired at" in operator.get(page).content.decode()
