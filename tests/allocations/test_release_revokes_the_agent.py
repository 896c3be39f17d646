"""Releasing an allocation revokes the node agent: the tenant had root on the node
and could read the agent's credential, which must not outlive their allocation."""

from __future__ import annotations

import pytest

from apps.allocations import nodes as node_service
from apps.allocations import services
from apps.allocations.models import Allocation
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals

pytestmark = pytest.mark.django_db


def test_the_agent_credential_stops_working_after_release(
    api, allocator, project, nodes, django_capture_on_commit_callbacks
):
    caller = principals.for_user(allocator)
    with django_capture_on_commit_callbacks(execute=True):
        [allocation] = services.allocate(caller, project, flavor_name="h100-8x", os_image="ubuntu-22.04")
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE
    node = allocation.node
    enrollment = {"hostname": node.hostname, "bootstrap_token": node_service.issue_bootstrap_token(node)}
    enrolled = api.post("/api/agent/v1/enroll", enrollment, format="json", REMOTE_ADDR="10.20.0.7")
    assert enrolled.status_code == 201, enrolled.content
    agent = {"HTTP_AUTHORIZATION": f"Node {enrolled.json()['credential']}"}
    assert api.post("/api/agent/v1/heartbeat", **agent).status_code == 204
    # A token issued during the allocation and never spent (one left in a node's cloud-init).
    unspent = {"hostname": node.hostname, "bootstrap_token": node_service.issue_bootstrap_token(node)}

    with django_capture_on_commit_callbacks(execute=True):
        services.release(caller, allocation)
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.RELEASED

    for refused in (api.post("/api/agent/v1/heartbeat", **agent), api.get("/api/agent/v1/tasks", **agent)):
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthenticated"
    assert api.post("/api/agent/v1/enroll", unspent, format="json").status_code == 401
    node.refresh_from_db()
    assert (node.credential_hash, node.bootstrap_token_hash, node.agent_address) == ("", "", None)
    [event] = AuditEvent.objects.filter(action="node.credential_revoke", target_id=str(node.pk))
    assert event.details == {"allocation": str(allocation.pk)}
