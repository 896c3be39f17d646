"""The tenant's usage page: the month's charges as in the billing export, and its
CSV, for tenant-wide roles of that tenant only."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.catalog.models import Flavor
from apps.core.models import AuditEvent
from apps.metering import services
from apps.metering.models import BillingExport, Rate
from apps.tenancy.principal import for_user
from tests.factories import FlavorFactory
from tests.support.fleet import made_allocation, make_nodes
from tests.support.members import member

pytestmark = pytest.mark.django_db


@pytest.fixture
def october(project):
    flavor = FlavorFactory(name="h100-8x", rate_per_node_hour="10.5")
    start = datetime(2026, 10, 3, tzinfo=UTC)
    made_allocation(project, make_nodes(flavor, 1)[0], flavor, start, start + timedelta(hours=10))
    return project


def test_a_billing_admin_sees_the_months_charges_and_downloads_them(as_user, billing_admin, october):
    client = as_user(billing_admin)
    dashboard = client.get("/")
    assert "/tenants/acme/usage/" in dashboard.content.decode()
    page = client.get("/tenants/acme/usage/", {"month": "2026-10"})
    assert page.status_code == 200
    text = page.content.decode()
    assert "Node-hours" in text
    assert "h100-8x" in text
    assert "10.00 hours" in text
    assert "105.00" in text  # 10 node-hours at 10.5
    download = client.get("/tenants/acme/usage/", {"month": "2026-10", "format": "csv"})
    assert download["Content-Disposition"] == 'attachment; filename="gpuaas-acme-2026-10.csv"'
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    assert [(row["resource"], row["amount"]) for row in rows if row["resource"] == "node_hours"] == [
        ("node_hours", "105.00")
    ]
    event = AuditEvent.objects.get(action="billing.export")
    assert (event.actor_type, event.target_type) == ("user", "tenant")


@pytest.mark.parametrize("month", ["September", "9999-12"])
def test_an_empty_month_says_so_and_a_bad_month_is_explained(as_user, billing_admin, october, month):
    client = as_user(billing_admin)
    assert "No usage in 2026-09." in client.get("/tenants/acme/usage/", {"month": "2026-09"}).content.decode()
    bad = client.get("/tenants/acme/usage/", {"month": month})
    assert bad.status_code == 400
    assert "Choose a month as YYYY-MM." in bad.content.decode()


def test_project_roles_and_other_tenants_do_not_see_the_tenants_charges(as_user, project, outsider, october):
    assert as_user(member("project_admin", project=project)).get("/tenants/acme/usage/").status_code == 403
    assert as_user(outsider).get("/tenants/acme/usage/").status_code == 404
    assert (
        "/tenants/acme/usage/"
        not in as_user(member("project_admin", project=project)).get("/").content.decode()
    )


def test_an_exported_month_is_shown_as_exported_with_the_corrections_of_earlier_months(
    as_user, billing_admin, platform_admin, october
):
    client = as_user(billing_admin)
    BillingExport.objects.create(
        tenant=october.tenant, period=datetime(2026, 9, 1).date(), body="", sha256=""
    )
    services.record_adjustment(
        for_user(platform_admin), october.tenant, month="2026-09", amount="-5.00", reason="Outage credit"
    )
    client.get("/tenants/acme/usage/", {"month": "2026-10", "format": "csv"})  # October exported
    flavor = Flavor.objects.get(name="h100-8x")
    Rate.objects.create(
        resource="node_hours",
        flavor=flavor,
        rate=Decimal("99"),
        effective_from=datetime(2026, 10, 1, tzinfo=UTC),
    )

    text = " ".join(client.get("/tenants/acme/usage/", {"month": "2026-10"}).content.decode().split())
    assert "Exported on" in text
    assert "105.00" in text  # the price it was exported at, not the rate added since
    assert "Adjustment" in text
    assert "of 2026-09:" in text
    assert "Outage credit" in text
    assert "100.00" in text  # the total: 105 less the 5 credited
