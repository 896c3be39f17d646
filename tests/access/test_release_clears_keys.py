"""Releasing an allocation takes every login key off the node before the node goes
back to the pool: the next tenant's node must not let the last one in."""

from __future__ import annotations

import pytest

from apps.access import services as access
from apps.access.models import AuthorizedKey
from apps.allocations import services as allocations
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from tests.support.agent import running_agent
from tests.support.ssh import access_urls, key_pair, ssh, wait_applied, wait_reported


def _release_steps(allocation) -> list[tuple[str, str]]:
    return list(
        allocation.steps.filter(phase=AllocationStep.Phase.RELEASE)
        .order_by("finished_at")
        .values_list("name", "status")
    )


# A live agent beside the test: PostgreSQL only, as test_ssh_login (SQLite locks its
# tables under the two writers; the embedded default's ssh is in test_make_run_path).
@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_release_removes_the_keys_from_the_node_before_giving_it_back(
    api, allocator, project, portal, active_allocation, tmp_path, django_capture_on_commit_callbacks
):
    api.force_login(allocator)
    access_url, keys_url = access_urls(project, active_allocation)
    with running_agent(portal.url, active_allocation.node, tmp_path, ssh="own") as agent:
        access = wait_reported(api, access_url, active_allocation)
        key = key_pair(tmp_path, "alice")
        added = api.post(keys_url, {"public_key": key.public_key}, format="json").json()
        wait_applied(api, keys_url, added["id"])
        assert ssh(access, key, "true", tmp_path / "known_hosts").returncode == 0
        authorized_keys = agent.state_dir / "ssh" / "authorized_keys"

        with django_capture_on_commit_callbacks(execute=True):
            allocations.release(principals.for_user(allocator), active_allocation)

        active_allocation.refresh_from_db()
        assert active_allocation.state == Allocation.State.RELEASED
        assert authorized_keys.read_text() == ""
        assert ssh(access, key, "true", tmp_path / "known_hosts").returncode == 255
    steps = _release_steps(active_allocation)
    assert [name for name, _ in steps].index("access_revoke") < [name for name, _ in steps].index(
        "os_release"
    )
    assert dict(steps)["access_revoke"] == AllocationStep.Status.SUCCEEDED
    assert not AuthorizedKey.objects.exists()
    assert AuditEvent.objects.filter(action="authorized_key.revoke_all", target_id=str(active_allocation.pk))


@pytest.mark.django_db
def test_release_of_a_node_without_an_ssh_agent_drops_the_records(
    allocator, active_allocation, tmp_path, django_capture_on_commit_callbacks
):
    caller = principals.for_user(allocator)
    AuthorizedKey.objects.create(
        allocation=active_allocation,
        public_key=key_pair(tmp_path, "alice").public_key.rsplit(" ", 1)[0],
        fingerprint="SHA256:x",
        owner=allocator.username,
        owner_user=allocator,
    )
    with django_capture_on_commit_callbacks(execute=True):
        allocations.release(caller, active_allocation)
    active_allocation.refresh_from_db()
    assert active_allocation.state == Allocation.State.RELEASED
    assert dict(_release_steps(active_allocation))["access_revoke"] == AllocationStep.Status.SUCCEEDED
    assert not AuthorizedKey.objects.exists()


@pytest.mark.django_db
def test_a_report_sent_before_the_keys_were_marked_does_not_hold_up_the_release(
    allocator, active_allocation, tmp_path
):
    """The release empties what the node should hold (the allocation leaves its keyed
    states) before its step marks the keys for removal. The agent can take the keys
    off and report in between; it reports only when its side changes, so the platform
    must ask it for another report, or the release waits out its budget and fails."""
    node = active_allocation.node
    Node.objects.filter(pk=node.pk).update(credential_hash="held-by-an-agent")
    key = AuthorizedKey.objects.create(
        allocation=active_allocation,
        public_key=key_pair(tmp_path, "alice").public_key.rsplit(" ", 1)[0],
        fingerprint="SHA256:x",
        owner=allocator.username,
        owner_user=allocator,
    )
    report = {"user": "ubuntu", "port": 22, "host_keys": []}
    access.agent_report(node, **report, applied=[key.pk])
    assert access.desired_for_node(node)["reported"]

    allocations.release(principals.for_user(allocator), active_allocation)  # its pipeline not run yet
    assert access.desired_for_node(node)["keys"] == []
    access.agent_report(node, **report, applied=[])  # the agent took them off and said so
    assert access.revoke_for_release(active_allocation) == 1  # the step marks them now

    assert not access.desired_for_node(node)["reported"]  # so the agent reports again
    access.agent_report(node, **report, applied=[])
    assert access.revoke_for_release(active_allocation) == 0
    assert access.desired_for_node(node)["reported"]
