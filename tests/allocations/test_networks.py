"""Which tenant network (VRF) an allocated node joins, and that release takes it off
that same network."""

from __future__ import annotations

import pytest

from apps.allocations.models import Allocation, AllocationStep, Node
from apps.core import simulation
from apps.networking import services as networking
from apps.networking.models import Vrf
from apps.storage import services as storage
from apps.tenancy import quotas
from tests.support.fleet import ccp_allocate, ccp_release, make_nodes

pytestmark = pytest.mark.django_db


@pytest.fixture
def integration(ccp_issuer):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def create_vpc(api, integration, tenant_id: str, vpc_id: str) -> str:
    response = api.post(
        "/api/network-manager/vpc", {"tenant_id": tenant_id, "vpc_id": vpc_id}, format="json", **integration
    )
    assert response.status_code == 201, response.content
    return response.json()["name"]


def release(api, token, node_id, capture):
    with capture(execute=True):
        response = ccp_release(api, token, node_id)
    assert response.status_code == 202, response.content


def port_vrf(node_id) -> str | None:
    port = simulation.get("ndfc", "port", Node.objects.get(pk=node_id).hostname)
    return port.state["vrf"] if port else None


def test_allocating_into_a_vpc_the_tenant_does_not_have_is_refused_and_takes_nothing(
    api, ccp_admin_token, integration, project, other_tenant_project, nodes
):
    networking.assign_tenant_network(other_tenant_project.tenant)
    create_vpc(api, integration, "globex", "vpc-globex")
    for network_id, dry_run in (("vpc-unknown", False), ("vpc-globex", False), ("vpc-unknown", True)):
        response = ccp_allocate(api, ccp_admin_token(), project, network_id=network_id, dry_run=dry_run)
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert network_id in error["details"]["network_id"][0]
    assert not Allocation.objects.exists()
    assert set(Node.objects.values_list("state", flat=True)) == {Node.State.AVAILABLE}


def test_node_joins_the_vrf_of_its_vpc_and_leaves_it_at_release(
    api, ccp_admin_token, integration, project, nodes, django_capture_on_commit_callbacks
):
    create_vpc(api, integration, "acme", "vpc-a")  # links the tenant's first VRF
    vpc_b = create_vpc(api, integration, "acme", "vpc-b")  # a VRF of its own from the pool
    token = ccp_admin_token()
    with django_capture_on_commit_callbacks(execute=True):
        response = ccp_allocate(api, token, project, network_id="vpc-b")
    assert response.status_code == 202, response.content
    node_id = response.json()["node_id"]
    assert port_vrf(node_id) == vpc_b

    release(api, token, node_id, django_capture_on_commit_callbacks)
    assert port_vrf(node_id) is None


def test_release_detaches_from_the_vrf_attached_even_when_the_vpc_appears_later(
    api,
    ccp_admin_token,
    ccp_issuer,
    integration,
    project,
    flavor,
    other_tenant_project,
    django_capture_on_commit_callbacks,
):
    """An allocation stored before network_id was checked named a VPC that did not
    exist and joined the tenant's first VRF; CCP creating that VPC afterwards must
    not send release to the new VRF, or the port stays on this tenant's network and
    the node's next tenant cannot get it."""
    [node] = make_nodes(flavor, 1)
    first_vrf = create_vpc(api, integration, "acme", "vpc-a")
    token = ccp_admin_token()
    with django_capture_on_commit_callbacks(execute=True):
        response = ccp_allocate(api, token, project)
    allocation_id = response.json()["allocation_id"]
    Allocation.objects.filter(pk=allocation_id).update(network_id="vpc-late")  # as such a row holds it
    assert port_vrf(node.pk) == first_vrf

    late_vrf = create_vpc(api, integration, "acme", "vpc-late")
    assert late_vrf != first_vrf
    release(api, token, node.pk, django_capture_on_commit_callbacks)
    assert Allocation.objects.get(pk=allocation_id).state == Allocation.State.RELEASED
    assert port_vrf(node.pk) is None

    globex = other_tenant_project.tenant
    networking.assign_tenant_network(globex)
    storage.provision_tenant_storage(globex)
    quotas.set_quota(globex, {"gpus": 8, "nodes": 1})
    globex_token = ccp_issuer.token(
        {
            "domain_id": "globex",
            "project_id": other_tenant_project.project_id,
            "roles": ["Cell Administrator"],
        }
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = ccp_allocate(api, globex_token, other_tenant_project)
    assert response.status_code == 202, response.content
    assert Allocation.objects.get(pk=response.json()["allocation_id"]).state == Allocation.State.ACTIVE
    assert port_vrf(node.pk) == Vrf.objects.get(tenant=globex).name


def test_release_of_an_allocation_without_a_recorded_vrf_still_detaches(
    api, ccp_admin_token, project, nodes, django_capture_on_commit_callbacks
):
    token = ccp_admin_token()
    with django_capture_on_commit_callbacks(execute=True):
        response = ccp_allocate(api, token, project)
    node_id = response.json()["node_id"]
    # Older allocations whose network step never finished recorded no VRF.
    AllocationStep.objects.filter(
        allocation_id=response.json()["allocation_id"], phase="provision", name="network"
    ).update(output={})
    assert port_vrf(node_id) is not None

    release(api, token, node_id, django_capture_on_commit_callbacks)
    assert port_vrf(node_id) is None
