"""Quota first, then capacity: over quota is 422 and takes nothing; no free node
is 409; ``dry_run`` itemizes without taking; ``count`` > 1 is all or nothing."""

from __future__ import annotations

import pytest

from apps.allocations.models import Allocation, Node
from apps.core.models import AuditEvent
from apps.tenancy import quotas
from tests.support.fleet import ccp_allocate, make_nodes

pytestmark = pytest.mark.django_db


def test_over_quota_answers_422_with_details_and_takes_nothing(
    api, ccp_admin_token, project, ready_tenant, nodes
):
    quotas.set_quota(ready_tenant, {"gpus": 8})
    response = ccp_allocate(api, ccp_admin_token(), project, count=2)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"resource": "gpus", "limit": 8, "used": 0, "requested": 16}
    assert not Allocation.objects.exists()
    assert Node.objects.filter(state=Node.State.AVAILABLE).count() == 4
    assert AuditEvent.objects.filter(action="allocation.create", outcome="denied").exists()


def test_quota_change_from_ccp_takes_effect_on_next_request(
    api, ccp_issuer, ccp_admin_token, project, ready_tenant, nodes
):
    quotas.set_quota(ready_tenant, {"gpus": 0})
    assert ccp_allocate(api, ccp_admin_token(), project).status_code == 422
    integration = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post(
        f"/api/metering/quota/{ready_tenant.tenant_id}",
        {"gpus": 16},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {integration}",
    )
    assert response.status_code == 200, response.content
    assert response.json()["resources"]["gpus"]["limit"] == 16
    assert ccp_allocate(api, ccp_admin_token(), project).status_code == 202


def test_quota_report_shows_usage_percent_and_warning(
    api, ccp_admin_token, ccp_issuer, project, ready_tenant, nodes, django_capture_on_commit_callbacks
):
    quotas.set_quota(ready_tenant, {"gpus": 18, "nodes": 2})
    with django_capture_on_commit_callbacks(execute=True):
        ccp_allocate(api, ccp_admin_token(), project, count=2)
    token = ccp_issuer.token({"domain_id": "acme", "roles": ["Tenant Billing Admin"]})
    report = api.get("/api/metering/quota/acme", HTTP_AUTHORIZATION=f"Bearer {token}").json()["resources"]
    assert report["gpus"] == {"limit": 18, "used": 16, "percent": 88.9, "warning": "80"}
    assert report["nodes"] == {"limit": 2, "used": 2, "percent": 100.0, "warning": "90"}


def test_quota_update_is_refused_to_tenant_roles(api, ccp_issuer, ready_tenant):
    token = ccp_issuer.token({"domain_id": "acme", "roles": ["Tenant Administrator"]})
    response = api.post(
        "/api/metering/quota/acme", {"gpus": 1000}, format="json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 403
    assert quotas.limits_of(ready_tenant)["gpus"] == 64


def test_quota_update_rejects_bad_values(api, ccp_issuer, ready_tenant):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post(
        "/api/metering/quota/acme",
        {"gpus": -1, "nodes": "many"},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"gpus", "nodes"}


def test_dry_run_itemizes_quota_and_capacity_without_taking(
    api, ccp_admin_token, project, ready_tenant, nodes
):
    quotas.set_quota(ready_tenant, {"gpus": 20, "nodes": 8})
    response = ccp_allocate(api, ccp_admin_token(), project, count=3, dry_run=True)
    assert response.status_code == 200
    plan = response.json()
    assert plan["dry_run"] is True
    assert plan["allowed"] is False
    assert plan["quota"]["gpus"] == {"used": 0, "limit": 20, "requested": 24, "after": 24}
    assert plan["free_nodes"] == 4
    assert "Quota exceeded for gpus" in plan["reason"]
    assert not Allocation.objects.exists()
    ok = ccp_allocate(api, ccp_admin_token(), project, count=2, dry_run=True).json()
    assert ok["allowed"] is True
    assert ok["reason"] == ""


def test_no_free_node_answers_conflict_and_count_is_all_or_nothing(api, ccp_admin_token, project, nodes):
    response = ccp_allocate(api, ccp_admin_token(), project, count=5)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert response.json()["error"]["details"] == {"flavor": "h100-8x", "requested": 5, "available": 4}
    assert not Allocation.objects.exists()
    assert Node.objects.filter(state=Node.State.AVAILABLE).count() == 4


def test_count_above_one_answers_a_list(api, ccp_admin_token, project, nodes):
    response = ccp_allocate(api, ccp_admin_token(), project, count=3)
    assert response.status_code == 202
    rows = response.json()["allocations"]
    assert len(rows) == 3
    assert len({row["node_id"] for row in rows}) == 3
    assert all(row["state"] == "PENDING" for row in rows)


def test_unapproved_and_maintenance_nodes_are_never_picked(api, ccp_admin_token, project, flavor):
    make_nodes(flavor, 1, prefix="new")[0].__class__.objects.filter(hostname__startswith="new").update(
        approved=False
    )
    make_nodes(flavor, 1, prefix="maint")[0].__class__.objects.filter(hostname__startswith="maint").update(
        state=Node.State.MAINTENANCE
    )
    response = ccp_allocate(api, ccp_admin_token(), project)
    assert response.status_code == 409


def test_bad_input_lists_every_field(api, ccp_admin_token, project, nodes):
    response = ccp_allocate(api, ccp_admin_token(), project, flavor="a100-99x", os_image="windows-95")
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"flavor", "os_image"}


def test_flavors_list_counts_free_nodes(api, ccp_admin_token, nodes, small_flavor):
    rows = api.get("/api/baremetal-manager/flavors", HTTP_AUTHORIZATION=f"Bearer {ccp_admin_token()}").json()
    by_name = {row["name"]: row for row in rows["results"]}
    assert by_name["h100-8x"]["available"] == 4
    assert by_name["h100-8x"]["gpus_per_node"] == 8
    assert by_name["h100-1x"]["available"] == 0
