"""Who may change which key on an allocation: a service account (an app controller)
only the records it owns; a person who manages the project's allocations the user
keys of anyone, never a controller's bootstrap key; a viewer nothing. Every change,
and every refusal, is audited. Bad keys are refused with the error envelope. A
suspended tenant's keys leave its nodes until it is reactivated."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from rest_framework.test import APIClient

from apps.access import services
from apps.access.models import AuthorizedKey
from apps.allocations import services as allocations
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership, ServiceAccount
from tests.support.members import member, service_account_client
from tests.support.snapshots import active_fleet_fixtures
from tests.support.ssh import key_pair

pytestmark = pytest.mark.django_db
# The allocation's pipeline and the tenant's network and storage were 0.12 CPU-s of each
# test's 0.2 (2026-11-29): made once for the module.
globals().update(active_fleet_fixtures())


def _user_client(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def keys_url(project, active_allocation):
    return f"/api/v1/projects/{project.pk}/allocations/{active_allocation.pk}/authorized-keys"


def _add(client, keys_url, public_key: str, purpose: str = "user") -> dict:
    response = client.post(keys_url, {"public_key": public_key, "purpose": purpose}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_service_account_changes_only_the_records_it_owns(keys_url, project, allocator, tmp_path):
    controller, controller_name = service_account_client(project, "jupyter-controller")
    other_controller, _ = service_account_client(project, "vllm-controller")
    admin = _user_client(allocator)
    bootstrap = _add(controller, keys_url, key_pair(tmp_path, "controller").public_key, "bootstrap")
    users_key = _add(admin, keys_url, key_pair(tmp_path, "alice").public_key)
    assert (bootstrap["owner"], bootstrap["purpose"]) == (controller_name, "bootstrap")

    # Another controller may not touch either; the project admin may not take the controller's way in.
    for client, key in (
        (other_controller, bootstrap),
        (other_controller, users_key),
        (controller, users_key),
    ):
        refused = client.delete(f"{keys_url}/{key['id']}")
        assert refused.status_code == 403, refused.content
        assert refused.json()["error"]["code"] == "forbidden"
    refused = admin.delete(f"{keys_url}/{bootstrap['id']}")
    assert refused.status_code == 403
    assert AuthorizedKey.objects.count() == 2
    assert AuditEvent.objects.filter(action="authorized_key.remove", outcome="denied").count() == 4

    assert controller.delete(f"{keys_url}/{bootstrap['id']}").status_code == 204
    assert not AuthorizedKey.objects.filter(pk=bootstrap["id"]).exists()
    event = AuditEvent.objects.get(action="authorized_key.remove", outcome="success")
    assert (event.actor, event.target_id) == (controller_name, bootstrap["id"])


def test_a_project_admin_manages_the_user_keys_of_others(keys_url, project, allocator, tmp_path):
    colleague = member("project_admin", project=project)
    theirs = _add(_user_client(colleague), keys_url, key_pair(tmp_path, "bob").public_key)

    assert _user_client(allocator).delete(f"{keys_url}/{theirs['id']}").status_code == 204
    assert not AuthorizedKey.objects.exists()


def test_a_viewer_may_neither_see_nor_change_access(project, active_allocation, keys_url, viewer, tmp_path):
    client = _user_client(viewer)
    access = f"/api/v1/projects/{project.pk}/allocations/{active_allocation.pk}/access"
    answers = [
        client.get(access),
        client.get(keys_url),
        client.post(keys_url, {"public_key": key_pair(tmp_path, "v").public_key}, format="json"),
    ]
    assert [answer.status_code for answer in answers] == [403, 403, 403]
    assert not AuthorizedKey.objects.exists()


def _rsa_1024() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.mark.parametrize(
    "public_key",
    [
        "",
        "ssh-ed25519 not-base64!",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGOpDC",  # truncated
        'command="rm -rf /" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGOpDC+It32rRl5w9qtLoxuR5mvU8+8CGFrnRhhFfLDF',
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGOpDC+It32rRl5w9qtLoxuR5mvU8+8CGFrnRhhFfLDF a\nssh-rsa AAAA",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "x" * 20_000,
        "rsa-1024",
    ],
    ids=["blank", "garbage", "truncated", "options", "two-lines", "private", "huge", "rsa-1024"],
)
def test_a_bad_key_is_refused_with_the_error_envelope(keys_url, allocator, public_key):
    public_key = _rsa_1024() if public_key == "rsa-1024" else public_key
    response = _user_client(allocator).post(keys_url, {"public_key": public_key}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "public_key" in error["details"]
    assert not AuthorizedKey.objects.exists()


def test_the_same_key_twice_and_keys_on_a_released_allocation_are_conflicts(
    keys_url, allocator, active_allocation, tmp_path, django_capture_on_commit_callbacks
):
    client = _user_client(allocator)
    key = key_pair(tmp_path, "alice").public_key
    _add(client, keys_url, key)
    again = client.post(keys_url, {"public_key": key}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"

    with django_capture_on_commit_callbacks(execute=True):
        allocations.release(principals.for_user(allocator), active_allocation)
    late = client.post(keys_url, {"public_key": key_pair(tmp_path, "late").public_key}, format="json")
    assert late.status_code == 409
    assert late.json()["error"]["code"] == "invalid_state"


def _on_node(allocation) -> set[str]:
    """The ids of the keys the node's agent is told its runtime user holds."""
    return {key["id"] for key in services.desired_for_node(allocation.node)["keys"]}


def test_the_keys_of_a_member_who_may_no_longer_manage_come_off_the_nodes(
    keys_url,
    project,
    active_allocation,
    allocator,
    tenant_admin,
    tmp_path,
    django_capture_on_commit_callbacks,
):
    leaver, demoted = member("project_admin", project=project), member("project_admin", project=project)
    theirs = _add(_user_client(leaver), keys_url, key_pair(tmp_path, "leaver").public_key)
    viewers = _add(_user_client(demoted), keys_url, key_pair(tmp_path, "demoted").public_key)
    mine = _add(_user_client(allocator), keys_url, key_pair(tmp_path, "stays").public_key)
    admin = principals.for_user(tenant_admin)
    with django_capture_on_commit_callbacks(execute=True):
        tenancy.remove_member(admin, Membership.objects.get(user=leaver))
    with django_capture_on_commit_callbacks(execute=True):
        membership = Membership.objects.get(user=demoted)
        membership.role = "viewer"
        membership.save()
    assert _on_node(active_allocation) == {mine["id"]}
    revoked = AuditEvent.objects.filter(action="authorized_key.revoke").values_list("target_id", flat=True)
    assert set(revoked) == {theirs["id"], viewers["id"]}


def test_the_keys_of_a_revoked_service_account_come_off_the_nodes(
    keys_url, project, active_allocation, tmp_path, django_capture_on_commit_callbacks
):
    controller, _ = service_account_client(project, "jupyter-controller")
    bootstrap = _add(controller, keys_url, key_pair(tmp_path, "controller").public_key, "bootstrap")
    assert _on_node(active_allocation) == {bootstrap["id"]}
    with django_capture_on_commit_callbacks(execute=True):
        tenancy.revoke_service_account(None, ServiceAccount.objects.get(project=project))
    assert _on_node(active_allocation) == set()


def test_a_suspended_tenants_keys_leave_its_nodes_and_come_back_on_reactivation(
    keys_url, tenant, active_allocation, allocator, platform_admin, tmp_path
):
    key = _add(_user_client(allocator), keys_url, key_pair(tmp_path, "mine").public_key)
    before = services.desired_for_node(active_allocation.node)
    assert _on_node(active_allocation) == {key["id"]}
    operator = principals.for_user(platform_admin)

    tenancy.suspend_tenant(operator, tenant, "unpaid")
    suspended = services.desired_for_node(active_allocation.node)
    assert suspended["keys"] == []
    assert suspended["user"] == before["user"]  # the runtime user stays; its keys go
    assert AuthorizedKey.objects.filter(pk=key["id"]).exists()

    tenancy.reactivate_tenant(operator, tenant)
    assert services.desired_for_node(active_allocation.node)["keys"] == before["keys"]
