"""Billing never reprices the past: rates apply from their start, a month once exported
answers the same bytes for ever, and a correction after export is a dated adjustment
line with its reason in the next month exported (decision 0051)."""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.core.errors import Forbidden, InvalidState, ValidationFailed
from apps.core.models import AuditEvent
from apps.metering import billing, services, utilization
from apps.metering.models import BillingAdjustment, BillingExport, Rate
from apps.storage import services as storage
from apps.storage.models import StorageResize, TenantStorage
from apps.tenancy.principal import for_user
from tests.support.fleet import made_allocation, make_nodes
from tests.support.pages import client_for

pytestmark = pytest.mark.django_db

SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)
OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)
MID_OCTOBER = datetime(2026, 10, 16, tzinfo=UTC)
NOVEMBER = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def integration(api, ccp_issuer):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"], "preferred_username": "ccp-billing"})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


@pytest.fixture
def busy(ready_tenant, project, flavor):
    """One 8-GPU node of cell-1 from September to past October."""
    [node] = make_nodes(flavor, 1)
    made_allocation(project, node, flavor, SEPTEMBER, NOVEMBER + timedelta(days=2))
    TenantStorage.objects.filter(tenant=ready_tenant).update(created_at=SEPTEMBER + timedelta(days=20))
    return ready_tenant


def export(api, month):
    response = api.get("/api/metering/export/csv", {"tenant_id": "acme", "period": month})
    assert response.status_code == 200, response.content
    return response.content


def rows(body):
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_a_rate_change_prices_from_its_start_on_a_row_of_its_own(integration, busy, flavor):
    Rate.objects.create(resource="node_hours", flavor=flavor, rate=Decimal("120"), effective_from=MID_OCTOBER)
    node_rows = [row for row in rows(export(integration, "2026-10")) if row["resource"] == "node_hours"]
    assert [
        (row["period_start"], row["period_end"], row["quantity"], row["rate"], row["amount"])
        for row in node_rows
    ] == [
        (
            OCTOBER.isoformat(),
            MID_OCTOBER.isoformat(),
            "360.0000",
            "98.3200",
            "35395.20",
        ),  # the flavor's own price
        (MID_OCTOBER.isoformat(), NOVEMBER.isoformat(), "384.0000", "120.000000", "46080.00"),
    ]
    # September knew nothing of it.
    september = [row for row in rows(export(integration, "2026-09")) if row["resource"] == "node_hours"]
    assert [(row["quantity"], row["rate"]) for row in september] == [("720.0000", "98.3200")]


def test_an_exported_month_answers_the_same_bytes_whatever_changes_later(integration, busy, project, flavor):
    first = export(integration, "2026-10")
    record = BillingExport.objects.get(period=OCTOBER.date())
    assert record.sha256 == hashlib.sha256(first).hexdigest()

    # Everything that would change October's numbers if it were measured again:
    Rate.objects.create(resource="node_hours", flavor=flavor, rate=Decimal("1"), effective_from=OCTOBER)
    Rate.objects.create(resource="storage_gb_hours", rate=Decimal("5"), effective_from=SEPTEMBER)
    [node] = make_nodes(flavor, 1, prefix="late")
    made_allocation(project, node, flavor, OCTOBER, MID_OCTOBER)
    TenantStorage.objects.filter(tenant=busy).update(quota_gb=99)

    assert export(integration, "2026-10") == first
    assert BillingExport.objects.count() == 1
    events = AuditEvent.objects.filter(action="billing.export")
    assert [event.details["final"] for event in events] == [True, True]


def test_the_month_still_running_is_usage_so_far_and_recorded_nowhere(integration, busy):
    now = datetime.now(UTC)
    body = export(integration, f"{now:%Y-%m}")
    assert body.startswith(b"tenant_id,project_id,period_start,period_end,resource")
    assert not BillingExport.objects.exists()
    assert AuditEvent.objects.get(action="billing.export").details["final"] is False


def test_a_month_over_before_the_tenant_was_onboarded_is_its_header_alone_recorded_nowhere(integration, busy):
    """Anyone who may read the usage may ask for any month back to year 1: those before
    the tenant existed bill nothing and leave no record behind (busy: onboarded in
    September, when its usage starts)."""
    for month in ("2026-08", "0001-01"):
        assert export(integration, month).decode() == ",".join(billing.HEADER) + "\r\n"
    assert not BillingExport.objects.exists()
    assert AuditEvent.objects.filter(action="billing.export", details__final=True).count() == 2

    assert rows(export(integration, "2026-09"))
    assert list(BillingExport.objects.values_list("period", flat=True)) == [SEPTEMBER.date()]


def test_a_correction_after_export_is_an_adjustment_line_in_the_next_export(
    integration, busy, platform_admin, project
):
    september = export(integration, "2026-09")
    operator = for_user(platform_admin)
    adjustment = services.record_adjustment(
        operator,
        busy,
        month="2026-09",
        amount="-150.25",
        reason="Node gpu-1 down 3 h, credited",
        project_id="cell-1",
    )
    event = AuditEvent.objects.get(action="billing.adjust")
    assert (event.actor, event.tenant_id, event.details["amount"]) == (
        platform_admin.username,
        busy.pk,
        "-150.25",
    )

    assert export(integration, "2026-09") == september  # the corrected month itself never changes
    october = export(integration, "2026-10")
    [line] = [row for row in rows(october) if row["resource"] == "adjustment"]
    assert (line["project_id"], line["period_start"], line["period_end"], line["amount"]) == (
        "cell-1",
        SEPTEMBER.isoformat(),
        OCTOBER.isoformat(),
        "-150.25",
    )
    assert line["note"] == f"{adjustment.created_at:%Y-%m-%d}: Node gpu-1 down 3 h, credited"
    adjustment.refresh_from_db()
    assert adjustment.export == BillingExport.objects.get(period=OCTOBER.date())
    assert export(integration, "2026-10") == october  # listed once, and October stays as exported


def test_an_adjustment_needs_an_exported_month_an_amount_a_reason_and_the_right(
    busy, platform_admin, tenant_admin
):
    operator = for_user(platform_admin)
    with pytest.raises(InvalidState):
        services.record_adjustment(operator, busy, month="2026-09", amount="10", reason="early")
    BillingExport.objects.create(tenant=busy, period=SEPTEMBER.date(), body="", sha256="")
    with pytest.raises(ValidationFailed) as bad:
        services.record_adjustment(
            operator, busy, month="2026-09", amount="0.001", reason=" ", project_id="nope"
        )
    assert set(bad.value.details) == {"amount", "reason", "project_id"}

    with pytest.raises(Forbidden):
        services.record_adjustment(for_user(tenant_admin), busy, month="2026-09", amount="10", reason="mine")
    assert not BillingAdjustment.objects.exists()


def test_operators_add_adjustments_in_the_admin_through_the_service(busy, platform_admin):
    BillingExport.objects.create(tenant=busy, period=SEPTEMBER.date(), body="", sha256="")
    client = client_for(platform_admin)
    response = client.post(
        "/admin/metering/billingadjustment/add/",
        {
            "tenant": busy.pk,
            "project": "",
            "period": "2026-09-15",
            "amount": "42.00",
            "reason": "Late storage fee",
        },
    )
    assert response.status_code == 302, response.content
    adjustment = BillingAdjustment.objects.get()
    assert (adjustment.period, adjustment.amount, adjustment.created_by) == (
        SEPTEMBER.date(),
        Decimal("42.00"),
        platform_admin.username,
    )
    assert AuditEvent.objects.filter(action="billing.adjust", actor=platform_admin.username).count() == 1
    # Rates are added, never edited: the past keeps its price.
    rate = Rate.objects.create(resource="gpu_hours", rate=Decimal("2"), effective_from=SEPTEMBER)
    client.post(f"/admin/metering/rate/{rate.pk}/change/", {"resource": "gpu_hours", "rate": "9"})
    rate.refresh_from_db()
    assert rate.rate == Decimal("2")


def test_storage_is_billed_at_the_size_it_had_at_each_moment(integration, busy, platform_admin):
    TenantStorage.objects.filter(tenant=busy).update(quota_gb=1000, created_at=SEPTEMBER)
    storage.resize_tenant_storage(for_user(platform_admin), busy, 2000)
    StorageResize.objects.update(resized_at=datetime(2026, 10, 11, tzinfo=UTC))
    [line] = [row for row in rows(export(integration, "2026-10")) if row["resource"] == "storage_gb_hours"]
    assert Decimal(line["quantity"]) == 10 * 24 * 1000 + 21 * 24 * 2000
    [line] = [row for row in rows(export(integration, "2026-09")) if row["resource"] == "storage_gb_hours"]
    assert Decimal(line["quantity"]) == 30 * 24 * 1000


@pytest.fixture
def measured_by_monitoring(project):
    """What the monitoring app registers: utilization of cell-1's GPUs, none of others'."""

    def provider(tenant, start, end):
        return {project.pk: 37.25}

    utilization.register_provider(provider)
    yield
    utilization._providers.remove(provider)


def test_usage_reports_measured_utilization_beside_billed_gpu_hours(
    integration, busy, other_project, measured_by_monitoring
):
    body = integration.get(
        "/api/metering/usage", {"tenant_id": "acme", "from": "2026-10-01", "to": "2026-11-01"}
    )
    projects = {row["project_id"]: row for row in body.json()["projects"]}
    assert (projects["cell-1"]["gpu_hours"], projects["cell-1"]["gpu_utilization"]) == (8 * 744, 37.2)
    assert projects["cell-2"]["gpu_utilization"] is None
    assert projects[None]["gpu_utilization"] is None
