"""The allocation's Access tab and the profile's SSH keys, as people use them: who sees
the tab, the ssh command and host keys once the node reported them, adding and
removing keys with feedback, and the keys users keep in their profile."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.access import services as host_access
from apps.access.models import AuthorizedKey, UserSshKey
from tests.factories import AllocationFactory
from tests.support.pages import HTMX
from tests.support.ssh import key_pair
from tests.support.world import MATRIX_KEYS

pytestmark = pytest.mark.django_db


@pytest.fixture
def allocation(project):
    allocation = AllocationFactory(project=project)
    type(allocation.node).objects.filter(pk=allocation.node_id).update(agent_address="10.20.0.7")
    allocation.node.refresh_from_db()
    return allocation


def _urls(allocation) -> dict:
    args = [allocation.project_id, allocation.pk]
    return {
        "detail": reverse("allocation_detail", args=args),
        "access": reverse("allocation_access", args=args),
    }


def test_the_access_tab_is_for_those_who_manage_the_allocation(
    as_user, allocation, project_admin, viewer, outsider
):
    urls = _urls(allocation)
    tabs = re.findall(r'data-tab="(\w+)"', as_user(project_admin).get(urls["detail"]).content.decode())
    assert tabs == ["overview", "access", "terminal", "sessions"]
    assert "data-tab" not in as_user(viewer).get(urls["detail"]).content.decode()
    assert as_user(viewer).get(urls["access"]).status_code == 403
    assert as_user(outsider).get(urls["access"]).status_code == 404


def test_the_tab_shows_the_ssh_command_and_host_keys_once_the_node_reported(
    as_user, allocation, project_admin
):
    client = as_user(project_admin)
    before = client.get(_urls(allocation)["access"]).content.decode()
    assert "has not reported its SSH server yet" in before

    host_access.agent_report(allocation.node, user="gpuaas", port=22, host_keys=[MATRIX_KEYS[0]], applied=[])
    page = client.get(_urls(allocation)["access"]).content.decode()

    assert '<code id="ssh-command" data-field="ssh-command">ssh gpuaas@10.20.0.7</code>' in page
    assert 'data-copy="ssh-command"' in page
    fingerprint = host_access.keys.fingerprint(MATRIX_KEYS[0])
    assert f"ssh-ed25519 <strong>{fingerprint}</strong>" in page
    assert f"10.20.0.7 {MATRIX_KEYS[0]}" in page  # the known_hosts line


def test_adding_and_removing_a_key_through_the_form(as_user, allocation, project_admin, tmp_path):
    client = as_user(project_admin)
    url = _urls(allocation)["access"]
    key = key_pair(tmp_path, "alice")

    bad = client.post(url, {"public_key": "ssh-ed25519 nope", "purpose": "user"}, **HTMX).content.decode()
    assert "Not an OpenSSH public key" in bad
    assert not AuthorizedKey.objects.exists()

    added = client.post(url, {"public_key": key.public_key, "purpose": "user"}, **HTMX).content.decode()
    [record] = AuthorizedKey.objects.all()
    assert f'data-key="{record.pk}"' in added
    assert ">pending</span>" in added
    assert 'hx-trigger="every 2s"' in added  # the tab follows the node till the key settles
    assert f"Key {record.fingerprint} added" in added
    assert project_admin.username in added

    remove = reverse("allocation_key_remove", args=[allocation.project_id, allocation.pk, record.pk])
    response = client.post(remove)
    assert response.status_code == 302
    assert not AuthorizedKey.objects.exists()  # no agent holds keys on this node: gone at once
    assert "No keys yet" in client.get(url).content.decode()


def test_a_controllers_bootstrap_key_has_no_remove_button_for_people(as_user, allocation, project_admin):
    AuthorizedKey.objects.create(
        allocation=allocation,
        public_key=MATRIX_KEYS[1],
        fingerprint="SHA256:bootstrap",
        purpose="bootstrap",
        owner="sa:controller",
    )
    page = as_user(project_admin).get(_urls(allocation)["access"]).content.decode()
    assert "sa:controller" in page
    assert "Remove</button>" not in page


def test_profile_keys_page(as_user, project_admin, tmp_path):
    client = as_user(project_admin)
    page = client.get(reverse("profile")).content.decode()
    assert "No SSH keys yet" in page
    assert f'href="{reverse("profile")}"' in page  # the header's link to it

    key = key_pair(tmp_path, "alice")
    added = client.post(reverse("profile"), {"name": "laptop", "public_key": key.public_key}, **HTMX)
    [record] = UserSshKey.objects.all()
    assert f'data-profile-key="{record.pk}"' in added.content.decode()
    again = client.post(reverse("profile"), {"public_key": key.public_key}, **HTMX).content.decode()
    assert "already in your profile" in again

    client.post(reverse("profile_key_remove", args=[record.pk]))
    assert not UserSshKey.objects.exists()


def test_a_report_from_before_the_agent_last_enrolled_is_not_shown(as_user, allocation, project_admin):
    """A redeployed node has new host keys: its previous agent's report must not pin users to old ones."""
    host_access.agent_report(allocation.node, user="gpuaas", port=22, host_keys=[MATRIX_KEYS[0]], applied=[])
    type(allocation.node).objects.filter(pk=allocation.node_id).update(enrolled_at=timezone.now())

    page = as_user(project_admin).get(_urls(allocation)["access"]).content.decode()

    assert "has not reported its SSH server yet" in page
    assert host_access.keys.fingerprint(MATRIX_KEYS[0]) not in page
