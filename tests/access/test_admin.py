"""Operators see the key records (public keys, owners, states) and the SSH servers the
nodes reported, and take a key off a node through the service, audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.access import services
from apps.access.models import AuthorizedKey, TerminalPolicy
from apps.core.models import AuditEvent
from tests.factories import AllocationFactory
from tests.support.pages import client_for
from tests.support.world import MATRIX_KEYS

pytestmark = pytest.mark.django_db


@pytest.fixture
def bootstrap_key(project):
    allocation = AllocationFactory(project=project)
    # An enrolled agent that holds the node's keys: a removal waits for its report.
    type(allocation.node).objects.filter(pk=allocation.node_id).update(credential_hash="0" * 64)
    services.agent_report(allocation.node, user="gpuaas", port=22, host_keys=[MATRIX_KEYS[1]], applied=[])
    return AuthorizedKey.objects.create(
        allocation=allocation,
        public_key=MATRIX_KEYS[0],
        fingerprint="SHA256:bootstrap",
        purpose="bootstrap",
        owner="sa:jupyter-controller",
    )


def test_operators_see_key_records_and_node_ssh_servers(platform_admin, bootstrap_key):
    client = client_for(platform_admin)
    listing = client.get(reverse("admin:access_authorizedkey_changelist")).content.decode()
    assert "SHA256:bootstrap" in listing
    assert "sa:jupyter-controller" in listing
    assert bootstrap_key.allocation.node.hostname in listing
    detail = client.get(reverse("admin:access_authorizedkey_change", args=[bootstrap_key.pk]))
    assert detail.status_code == 200
    hosts = client.get(reverse("admin:access_nodesshhost_changelist")).content.decode()
    assert bootstrap_key.allocation.node.hostname in hosts
    assert client.get(reverse("admin:access_usersshkey_changelist")).status_code == 200


def test_an_operator_takes_a_controllers_key_off_the_node(platform_admin, bootstrap_key):
    response = client_for(platform_admin).post(
        reverse("admin:access_authorizedkey_changelist"),
        {"action": "remove_keys", "_selected_action": [str(bootstrap_key.pk)]},
    )
    assert response.status_code == 302
    bootstrap_key.refresh_from_db()
    assert bootstrap_key.state == AuthorizedKey.State.REMOVING  # the node's agent reports it gone
    event = AuditEvent.objects.get(action="authorized_key.remove")
    assert (event.actor, event.outcome) == (platform_admin.username, "success")


def test_an_operators_change_to_a_terminal_policy_is_audited(platform_admin, project):
    # Retention decides when session recordings are deleted: shortening it is an operator
    # act the audit must show.
    client = client_for(platform_admin)
    form = {
        "project": str(project.pk),
        "idle_timeout_seconds": "600",
        "max_duration_seconds": "3600",
        "recording_retention_days": "30",
    }
    assert client.post(reverse("admin:access_terminalpolicy_add"), form).status_code == 302
    policy = TerminalPolicy.objects.get(project=project)
    changed = {**form, "recording_retention_days": "1"}
    assert (
        client.post(reverse("admin:access_terminalpolicy_change", args=[policy.pk]), changed).status_code
        == 302
    )
    events = AuditEvent.objects.filter(target_id=str(policy.pk)).order_by("occurred_at", "id")
    assert [(e.action, e.actor) for e in events] == [
        ("admin.terminalpolicy.add", platform_admin.username),
        ("admin.terminalpolicy.change", platform_admin.username),
    ]
    assert events[1].details == {"changes": [{"changed": {"fields": ["Recording retention days"]}}]}
