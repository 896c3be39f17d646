"""The whole allocation lifecycle through CCP's API, with simulated hardware."""

from __future__ import annotations

import pytest

from apps.allocations.models import Allocation, Node
from apps.core import simulation
from tests.support.fleet import ccp_allocate, ccp_release

pytestmark = pytest.mark.django_db


def test_allocate_provisions_to_active_and_release_returns_node(
    api, ccp_admin_token, project, nodes, django_capture_on_commit_callbacks
):
    token = ccp_admin_token()
    with django_capture_on_commit_callbacks(execute=True):
        response = ccp_allocate(api, token, project)
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["state"] == "PENDING"
    node_id = body["node_id"]

    status = api.get(f"/api/baremetal-manager/{node_id}/status", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert status["state"] == "ACTIVE"
    assert status["progress"] == 100
    assert status["tenant_id"] == "acme"
    assert status["project_id"] == project.project_id
    assert status["allocation_id"] == body["allocation_id"]
    assert status["failure_reason"] == ""
    node = Node.objects.get(pk=node_id)
    assert node.state == Node.State.ALLOCATED
    assert simulation.get("maas", "machine", node.hostname).state["status"] == "Deployed"
    assert simulation.get("ndfc", "port", node.hostname).state["vrf"].startswith("vrf-")
    assert node.hostname in simulation.get("ddn", "nodemap", "nm-acme").state["nodes"]

    with django_capture_on_commit_callbacks(execute=True):
        response = ccp_release(api, token, node_id)
    assert response.status_code == 202
    assert response.json()["state"] == "RELEASING"
    status = api.get(f"/api/baremetal-manager/{node_id}/status", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert status["state"] == "RELEASED"
    node.refresh_from_db()
    assert node.state == Node.State.AVAILABLE
    assert simulation.get("ndfc", "port", node.hostname) is None
    assert node.hostname not in simulation.get("ddn", "nodemap", "nm-acme").state["nodes"]
    assert simulation.get("maas", "machine", node.hostname).state["status"] == "Ready"
    assert Allocation.objects.get(pk=body["allocation_id"]).steps.filter(status="succeeded").count() == 9
