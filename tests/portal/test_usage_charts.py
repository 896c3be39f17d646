"""The dashboard's chart of GPU-hours per day per project, and the usage page's of
charges by day: their data comes from the usage and billing services the metering API
and the CSV export answer from, day by day, for tenant-wide roles only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.metering import billing, usage
from tests.factories import FlavorFactory, ProjectFactory
from tests.support.fleet import made_allocation, make_nodes
from tests.support.members import member

pytestmark = pytest.mark.django_db

URL = "/tenants/acme/usage/daily/"


def _midnight() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
def recent_use(project, other_project):
    """cell-1: an 8-GPU node from 20:00 two days ago to 06:00 yesterday (32 then 48
    GPU-hours); cell-2: a 1-GPU node for 90 minutes five days ago; one use three weeks
    ago, before the chart's window; a third project without any use."""
    big = FlavorFactory(name="h100-8x", gpus_per_node=8)
    small = FlavorFactory(name="l4-1x", gpus_per_node=1)
    today = _midnight()
    made_allocation(
        project, make_nodes(big, 1)[0], big, today - timedelta(hours=28), today - timedelta(hours=18)
    )
    made_allocation(
        other_project,
        make_nodes(small, 1)[0],
        small,
        today - timedelta(days=5) + timedelta(hours=1),
        today - timedelta(days=5) + timedelta(hours=2, minutes=30),
    )
    made_allocation(
        other_project,
        make_nodes(small, 1, prefix="old")[0],
        small,
        today - timedelta(days=21),
        today - timedelta(days=20),
    )
    ProjectFactory(tenant=project.tenant, project_id="cell-3", name="Cell 3")
    return project.tenant


def test_the_charts_data_carries_each_projects_gpu_hours_per_day(as_user, billing_admin, recent_use):
    response = as_user(billing_admin).get(URL)
    assert response.status_code == 200
    body = response.json()
    today = _midnight()
    assert body["days"] == [(today - timedelta(days=13 - i)).date().isoformat() for i in range(14)]
    expected = {"cell-1": {11: 32.0, 12: 48.0}, "cell-2": {8: 1.5}}
    assert body["unit"] == "GPU-hours"
    used = {p["project_id"]: {i: h for i, h in enumerate(p["values"]) if h} for p in body["projects"]}
    assert used == expected
    assert [p["name"] for p in body["projects"]] == ["Cell 1", "Cell 2"]
    # The days add up to what the usage API answers for the whole window.
    whole = usage.by_project(recent_use, today - timedelta(days=13), today + timedelta(days=1))
    assert {line["project_id"]: line["gpu_hours"] for line in whole if line["gpu_hours"]} == {
        p["project_id"]: sum(p["values"]) for p in body["projects"]
    }


def test_the_dashboard_shows_the_chart_to_whoever_may_see_the_usage(as_user, billing_admin, project):
    page = as_user(billing_admin).get("/").content.decode()
    assert f'data-url="{URL}"' in page
    assert "uPlot-1.6.32.iife.min.js" in page
    assert "As a table" in page  # the chart's text alternative
    viewer = as_user(member("project_admin", project=project)).get("/").content.decode()
    assert "data-usage-chart" not in viewer
    assert "uPlot" not in viewer


@pytest.mark.parametrize("url", [URL, "/tenants/acme/usage/charges/?month=2026-10"])
def test_project_roles_and_other_tenants_get_no_chart_data(as_user, project, outsider, url):
    assert as_user(member("project_admin", project=project)).get(url).status_code == 403
    assert as_user(outsider).get(url).status_code == 404


@pytest.fixture
def october(project):
    """10 node-hours at 10.5 across a midnight: 4 on October 3rd, 6 on the 4th."""
    flavor = FlavorFactory(name="h100-8x", rate_per_node_hour="10.5")
    start = datetime(2026, 10, 3, 20, tzinfo=UTC)
    made_allocation(project, make_nodes(flavor, 1)[0], flavor, start, start + timedelta(hours=10))
    return project.tenant


def test_the_usage_pages_chart_carries_the_months_charges_by_day(as_user, billing_admin, october):
    client = as_user(billing_admin)
    page = client.get("/tenants/acme/usage/", {"month": "2026-10"}).content.decode()
    assert 'data-url="/tenants/acme/usage/charges/?month=2026-10"' in page
    assert "Charges by day (USD, UTC)" in page
    body = client.get("/tenants/acme/usage/charges/", {"month": "2026-10"}).json()
    assert body["unit"] == "USD"
    assert body["days"][0] == "2026-10-01"
    assert len(body["days"]) == 31
    assert [(p["project_id"], {i: v for i, v in enumerate(p["values"]) if v}) for p in body["projects"]] == [
        ("cell-1", {2: 42.0, 3: 63.0})
    ]
    # The same 105.00 as the month's billing export.
    rows, _ = billing.statement(october, datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    assert sum(row.amount for row in rows) == 105


def test_a_bad_month_is_a_400_with_the_error_envelope(as_user, billing_admin, october):
    response = as_user(billing_admin).get("/tenants/acme/usage/charges/", {"month": "October"})
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"period": ["Give a month as YYYY-MM."]}
