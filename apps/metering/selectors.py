"""Prices as the billing export prices them, for the pages that show a price before
and while a node is held: a flavor's price per node-hour, an allocation's estimate
per hour and per day, and what an allocation has cost so far.

One pricing path: every figure comes from ``billing.RateBook`` over the effective-dated
rates (``metering.Rate``, with a flavor's ``rate_per_node_hour`` before its first
one), as the billing CSV prices usage. A node-hour of a flavor costs its node-hour
rate plus the GPU-hour rate for each of its GPUs and the CPU-hour rate for each of its
cores, since the export bills an allocation's hours on all three lines.

The accrued cost is an estimate of one allocation's share: the export rounds each
project's quantities and amounts as billed, so its total can differ by a few cents.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.utils import timezone

from apps.metering.billing import MONEY, RateBook, charges, rates_until
from apps.metering.models import Rate
from apps.metering.usage import HOUR, Line, period

DAY = timedelta(days=1)


def currency() -> str:
    return settings.BILLING_CURRENCY


def _node_hour(book: RateBook, moment: datetime, flavor, gpus: int) -> Decimal:
    node = book.at(moment, Line(None, Rate.Resource.NODE_HOURS, Decimal(0), flavor))
    gpu = book.at(moment, Line(None, Rate.Resource.GPU_HOURS, Decimal(0)))
    cpu = book.at(moment, Line(None, Rate.Resource.CPU_HOURS, Decimal(0)))
    # Decimal(): a flavor made in memory may still hold its price as given (a string).
    return Decimal(node) + gpu * gpus + cpu * flavor.cpu_cores


def _cost(book: RateBook, flavor, gpus: int) -> Decimal:
    """The window of ``book`` priced piece by piece (each at the rate of its start), unrounded."""
    total = Decimal(0)
    for start, end in book.pieces:
        hours = Decimal((end - start).total_seconds()) / HOUR
        total += _node_hour(book, start, flavor, gpus) * hours
    return total


def node_hour_prices(flavors: Iterable, at: datetime | None = None) -> dict:
    """Each flavor's price of one node-hour at ``at`` (now), by flavor pk (one query)."""
    at = at or timezone.now()
    book = RateBook(at, at + timedelta(microseconds=1), rates_until(at + timedelta(microseconds=1)))
    return {flavor.pk: _node_hour(book, at, flavor, flavor.gpus_per_node) for flavor in flavors}


@dataclass(frozen=True)
class Estimate:
    per_hour: Decimal
    per_day: Decimal  # the next 24 hours, a rate that takes effect in them included


def estimate(flavor, count: int, at: datetime | None = None) -> Estimate:
    """What ``count`` nodes of ``flavor`` would cost from ``at`` (now): the first hour's
    rate, and the next day priced as the export would price it (one query)."""
    at = at or timezone.now()
    book = RateBook(at, at + DAY)
    per_hour = _node_hour(book, at, flavor, flavor.gpus_per_node) * count
    per_day = _cost(book, flavor, flavor.gpus_per_node) * count
    return Estimate(per_hour.quantize(MONEY, ROUND_HALF_UP), per_day.quantize(MONEY, ROUND_HALF_UP))


def accrued(allocations: Iterable, now: datetime | None = None) -> dict:
    """What each allocation has cost from its activation until it finished (or now),
    by allocation pk; one query whatever their number. ``flavor`` is read from each, so
    select it with them."""
    now = now or timezone.now()
    rates = None
    costs = {}
    for allocation in allocations:
        if allocation.activated_at is None:
            costs[allocation.pk] = Decimal(0)
            continue
        until = min(allocation.finished_at or now, now)
        if until <= allocation.activated_at:
            costs[allocation.pk] = Decimal(0)
            continue
        if rates is None:
            rates = rates_until(now)
        book = RateBook(allocation.activated_at, until, rates)
        cost = _cost(book, allocation.flavor, allocation.gpus)
        costs[allocation.pk] = cost.quantize(MONEY, ROUND_HALF_UP)
    return costs


def month_to_date(tenant) -> Decimal:
    """The tenant's charges this month (UTC) so far: the total of the month's billing
    statement as the usage page and the export show it now."""
    start, end = period(f"{timezone.now().astimezone(UTC):%Y-%m}")
    return sum((charge.amount for charge in charges(tenant, start, end)), start=Decimal(0))
