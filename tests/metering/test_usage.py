"""Usage per project over a window and the monthly billing export, measured from
allocations' active time and the tenant's storage (CONTRACT.md metering)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.allocations.models import Allocation
from apps.core.models import AuditEvent
from apps.metering.models import Rate
from apps.storage.models import TenantStorage
from tests.factories import ProjectFactory, TenantFactory
from tests.support.fleet import made_allocation, make_nodes

pytestmark = pytest.mark.django_db

# A past month, so that "now" never cuts the window short.
OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)
NOVEMBER = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def october(ready_tenant, project, other_project, flavor, small_flavor):
    """cell-1: 12 h of an 8-GPU node at the month's start, then a node from the 10th to
    past the month's end. cell-2: 90 min of a 1-GPU node. Nothing else counts."""
    big, small = make_nodes(flavor, 2), make_nodes(small_flavor, 2, prefix="small")
    made_allocation(project, big[0], flavor, OCTOBER - timedelta(hours=12), OCTOBER + timedelta(hours=12))
    made_allocation(project, big[1], flavor, datetime(2026, 10, 10, tzinfo=UTC), NOVEMBER + timedelta(days=3))
    made_allocation(
        other_project,
        small[0],
        small_flavor,
        datetime(2026, 10, 5, 8, tzinfo=UTC),
        datetime(2026, 10, 5, 9, 30, tzinfo=UTC),
    )
    made_allocation(
        other_project, small[1], small_flavor, None, None, state=Allocation.State.FAILED
    )  # never active
    elsewhere = ProjectFactory(tenant=TenantFactory(tenant_id="globex", name="Globex"), project_id="g-1")
    made_allocation(elsewhere, small[1], small_flavor, OCTOBER, NOVEMBER)
    # The tenant's storage, 1,000 GB since before the month.
    TenantStorage.objects.filter(tenant=ready_tenant).update(
        quota_gb=1000, created_at=OCTOBER - timedelta(days=3)
    )
    return ready_tenant


def get_usage(api, token, **query):
    return api.get("/api/metering/usage", query, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_usage_per_project_counts_only_the_hours_inside_the_window(api, ccp_issuer, october):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = get_usage(api, token, tenant_id="acme", **{"from": "2026-10-01", "to": "2026-11-01"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["tenant_id"], body["from"], body["to"]) == (
        "acme",
        OCTOBER.isoformat(),
        NOVEMBER.isoformat(),
    )
    rows = {row["project_id"]: row for row in body["projects"]}
    live_hours = 22 * 24  # the 10th to the month's end
    assert rows["cell-1"] == {
        "project_id": "cell-1",
        "name": "Cell 1",
        "node_hours": 12 + live_hours,
        "gpu_hours": 8 * (12 + live_hours),
        "cpu_hours": 112 * (12 + live_hours),
        "cluster_hours": 0,
        "storage_gb_hours": 0,
        "gpu_utilization": None,  # no metrics provider: not measured, not 0 %
    }
    assert (rows["cell-2"]["node_hours"], rows["cell-2"]["gpu_hours"], rows["cell-2"]["cpu_hours"]) == (
        1.5,
        1.5,
        24,
    )
    assert rows[None]["storage_gb_hours"] == 1000 * 31 * 24
    assert rows[None]["node_hours"] == 0
    assert set(rows) == {"cell-1", "cell-2", None}


def test_an_allocation_still_active_is_used_until_now(api, ccp_issuer, ready_tenant, project, flavor):
    started = timezone.now() - timedelta(hours=5)
    made_allocation(project, make_nodes(flavor, 1)[0], flavor, started, state=Allocation.State.ACTIVE)
    token = ccp_issuer.token({"domain_id": "acme", "roles": ["Tenant Billing Admin"]})
    tomorrow = (timezone.now() + timedelta(days=1)).isoformat()
    response = get_usage(api, token, tenant_id="acme", **{"from": "2026-01-01", "to": tomorrow})
    row = next(row for row in response.json()["projects"] if row["project_id"] == "cell-1")
    assert 5 <= row["node_hours"] < 5.1  # not the window's end, a day ahead


def test_usage_is_the_tenants_own_and_tenant_wide(api, ccp_issuer, october):
    window = {"from": "2026-10-01", "to": "2026-11-01"}
    admin = ccp_issuer.token({"domain_id": "acme", "roles": ["Tenant Administrator"]})
    assert get_usage(api, admin, tenant_id="acme", **window).status_code == 200
    assert get_usage(api, admin, tenant_id="globex", **window).status_code == 404
    cell_admin = ccp_issuer.token(
        {"domain_id": "acme", "project_id": "cell-1", "roles": ["Cell Administrator"]}
    )
    assert get_usage(api, cell_admin, tenant_id="acme", **window).status_code == 403
    assert api.get("/api/metering/usage", {"tenant_id": "acme", **window}).status_code == 401


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"from": "2026-10-01", "to": "2026-11-01"}, "tenant_id"),
        ({"tenant_id": "acme", "to": "2026-11-01"}, "from"),
        ({"tenant_id": "acme", "from": "2026-10-01T00:00:00", "to": "2026-11-01"}, "from"),  # no zone
        ({"tenant_id": "acme", "from": "2026-13-01", "to": "2026-11-01"}, "from"),
        ({"tenant_id": "acme", "from": "2026-11-01", "to": "2026-10-01"}, "to"),
    ],
)
def test_a_bad_window_is_refused_with_the_field_named(api, ccp_issuer, october, query, field):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = get_usage(api, token, **query)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]
    assert error["correlation_id"]


def export(api, token, **query):
    return api.get("/api/metering/export/csv", query, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_billing_export_prices_each_project_and_resource(api, ccp_issuer, october, settings):
    settings.BILLING_CURRENCY = "EUR"
    Rate.objects.create(resource="storage_gb_hours", rate=Decimal("0.0001"), effective_from=OCTOBER)
    Rate.objects.create(resource="gpu_hours", rate=Decimal("0"), effective_from=OCTOBER)
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = export(api, token, tenant_id="acme", period="2026-10")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="gpuaas-acme-2026-10.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    lines = {(row["project_id"], row["resource"], row["flavor"]): row for row in rows}
    assert [key for key in lines] == [
        ("cell-1", "gpu_hours", ""),
        ("cell-1", "cpu_hours", ""),
        ("cell-1", "node_hours", "h100-8x"),
        ("cell-2", "gpu_hours", ""),
        ("cell-2", "cpu_hours", ""),
        ("cell-2", "node_hours", "h100-1x"),
        ("", "storage_gb_hours", ""),
    ]
    node = lines[("cell-1", "node_hours", "h100-8x")]
    assert (node["quantity"], node["unit"], node["rate"], node["currency"]) == (
        "540.0000",
        "hour",
        "98.3200",
        "EUR",
    )
    assert node["amount"] == str((Decimal(540) * Decimal("98.32")).quantize(Decimal("0.01")))
    assert (node["period_start"], node["period_end"]) == (OCTOBER.isoformat(), NOVEMBER.isoformat())
    storage = lines[("", "storage_gb_hours", "")]
    assert (storage["quantity"], storage["unit"], storage["amount"]) == ("744000.0000", "GB-hour", "74.40")
    assert lines[("cell-2", "cpu_hours", "")]["amount"] == "0.00"  # no rate for CPU-hours: listed at 0
    assert all(row["tenant_id"] == "acme" for row in rows)
    event = AuditEvent.objects.get(action="billing.export")
    assert event.details == {"from": OCTOBER.isoformat(), "to": NOVEMBER.isoformat(), "final": True}


# The last month of year 9999 has no month after it to end at.
@pytest.mark.parametrize("period", ["October", "2026-13", "9999-12"])
def test_the_billing_export_wants_a_month_and_a_tenant_in_scope(api, ccp_issuer, october, period):
    integration = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    bad = export(api, integration, tenant_id="acme", period=period)
    assert bad.status_code == 400
    assert bad.json()["error"]["details"] == {"period": ["Give a month as YYYY-MM."]}
    billing = ccp_issuer.token({"domain_id": "globex", "roles": ["Tenant Billing Admin"]})
    assert export(api, billing, tenant_id="acme", period="2026-10").status_code == 404
    assert not AuditEvent.objects.filter(action="billing.export").exists()


def test_a_project_on_two_flavors_has_node_hours_per_flavor_and_one_gpu_line(
    api, ccp_issuer, ready_tenant, project, flavor, small_flavor
):
    made_allocation(project, make_nodes(flavor, 1)[0], flavor, OCTOBER, OCTOBER + timedelta(hours=2))
    small = make_nodes(small_flavor, 1, prefix="small")[0]
    made_allocation(project, small, small_flavor, OCTOBER, OCTOBER + timedelta(hours=3))
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    rows = list(
        csv.DictReader(io.StringIO(export(api, token, tenant_id="acme", period="2026-10").content.decode()))
    )
    mine = [
        (row["resource"], row["flavor"], row["quantity"]) for row in rows if row["project_id"] == "cell-1"
    ]
    assert mine == [
        ("gpu_hours", "", "19.0000"),  # 8 x 2 + 1 x 3
        ("cpu_hours", "", "272.0000"),  # 112 x 2 + 16 x 3
        ("node_hours", "h100-1x", "3.0000"),
        ("node_hours", "h100-8x", "2.0000"),
    ]
