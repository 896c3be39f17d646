"""The prices the pages show come from the rate cards the billing export prices with:
a flavor's node-hour, the allocate form's estimate, an allocation's cost so far and a
tenant's spend this month (``apps.metering.selectors``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from apps.allocations.models import Allocation
from apps.metering import billing
from apps.metering import selectors as pricing
from apps.metering.models import Rate
from tests.support.fleet import made_allocation, make_nodes

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def priced(flavor):
    """``h100-8x`` (98.32 a node-hour on the flavor) repriced by dated rates: 100 from
    October 10th, 110 from the 20th at 18:00 (a rate still to come at NOW); GPU-hours
    at 0.50 and CPU-hours at 0.01 from October 1st."""
    Rate.objects.create(
        resource="node_hours", flavor=flavor, rate="100", effective_from=datetime(2026, 10, 10, tzinfo=UTC)
    )
    Rate.objects.create(
        resource="node_hours", flavor=flavor, rate="110", effective_from=NOW + timedelta(hours=6)
    )
    Rate.objects.create(resource="gpu_hours", rate="0.50", effective_from=datetime(2026, 10, 1, tzinfo=UTC))
    Rate.objects.create(resource="cpu_hours", rate="0.01", effective_from=datetime(2026, 10, 1, tzinfo=UTC))
    return flavor


def test_a_node_hour_is_the_node_gpu_and_cpu_rates_in_effect(priced, small_flavor):
    prices = pricing.node_hour_prices([priced, small_flavor], at=NOW)
    # 100 + 8 GPUs x 0.50 + 112 cores x 0.01; the rate to come is not in effect yet.
    assert prices[priced.pk] == Decimal("105.12")
    # No node-hour rate of its own: the flavor's price (0 here) and the shared rates.
    assert prices[small_flavor.pk] == Decimal("0.50") + Decimal("0.16")
    # Before the dated rates: the flavor's own price.
    assert pricing.node_hour_prices([priced], at=datetime(2026, 9, 1, tzinfo=UTC))[priced.pk] == Decimal(
        "98.32"
    )


def test_the_estimate_prices_the_next_day_with_a_rate_to_come(priced):
    estimate = pricing.estimate(priced, 2, at=NOW)
    assert estimate.per_hour == Decimal("210.24")
    # 6 hours at 105.12, then 18 at 115.12, for two nodes.
    assert estimate.per_day == 2 * (6 * Decimal("105.12") + 18 * Decimal("115.12"))


def test_the_cost_so_far_is_what_the_export_bills(ready_tenant, project, priced):
    [node] = make_nodes(priced, 1)
    allocation = made_allocation(
        project, node, priced, datetime(2026, 10, 9, tzinfo=UTC), state=Allocation.State.ACTIVE
    )
    with time_machine.travel(NOW + timedelta(hours=8), tick=False):
        now = timezone.now()
        cost = pricing.accrued([Allocation.objects.select_related("flavor").get(pk=allocation.pk)])
        billed = billing.charges(ready_tenant, datetime(2026, 10, 1, tzinfo=UTC), now)
        spend = pricing.month_to_date(ready_tenant)
    compute = sum(charge.amount for charge in billed if charge.line.project is not None)
    assert cost[allocation.pk] == compute
    # A day at 98.32 + 5.12 (8 GPUs, 112 cores), 258 hours at 105.12, 2 hours at 115.12.
    assert cost[allocation.pk] == Decimal("2482.56") + Decimal("27120.96") + Decimal("230.24")
    assert spend == sum(charge.amount for charge in billed)


def test_what_has_not_started_costs_nothing(ready_tenant, project, priced):
    [node] = make_nodes(priced, 1)
    pending = made_allocation(project, node, priced, None, state=Allocation.State.PROVISIONING)
    assert pricing.accrued([pending]) == {pending.pk: Decimal(0)}
