"""Usage priced, and the monthly billing export (CONTRACT.md
``GET /api/metering/export/csv``; decisions 0028, 0051).

Prices are effective-dated (``metering.Rate``): a window is cut where a rate starts,
and each piece is priced at the rate in effect at its start, on rows of their own
(``period_start``/``period_end`` say which part of the month a row prices). A month's
export, once the month is over, is recorded and every later export of it answers the
same bytes; a correction after it is a ``BillingAdjustment``, listed with its reason
in the next month exported.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from itertools import pairwise

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse
from django.utils import timezone

from apps.core import audit
from apps.metering.models import BillingAdjustment, BillingExport, Rate
from apps.metering.usage import LABELS, QUANTITY, RESOURCES, Line, day_series, lines, per_day, period
from apps.tenancy.models import Project, Tenant

MONEY = Decimal("0.01")
HEADER = [
    "tenant_id",
    "project_id",
    "period_start",
    "period_end",
    "resource",
    "flavor",
    "quantity",
    "unit",
    "rate",
    "currency",
    "amount",
    "note",
]


@dataclass(frozen=True)
class Charge:
    line: Line
    start: datetime  # the part of the window this rate priced
    end: datetime
    quantity: Decimal  # rounded as billed
    rate: Decimal
    amount: Decimal

    @property
    def unit(self) -> str:
        return "GB-hour" if self.line.resource == "storage_gb_hours" else "hour"


class RateBook:
    """The rates that price ``[start, end)``, and where that window must be cut."""

    def __init__(self, start: datetime, end: datetime, rates: list[Rate] | None = None):
        """``rates``: those of a longer window ending no earlier (``rates_until``), to
        price its parts without asking again."""
        if rates is None:
            rates = rates_until(end)
        self.rates = [rate for rate in rates if rate.effective_from < end]
        starts = {rate.effective_from for rate in self.rates if start < rate.effective_from < end}
        cuts = sorted({start, end} | starts)
        self.pieces = list(pairwise(cuts))

    def at(self, moment: datetime, line: Line) -> Decimal:
        flavor_id = line.flavor.pk if line.flavor else None
        found = None
        for rate in self.rates:
            if rate.effective_from > moment:
                break
            if rate.resource == line.resource and rate.flavor_id == flavor_id:
                found = rate.rate
        if found is not None:
            return found
        # Before a flavor's first dated rate, the price it was created with.
        return line.flavor.rate_per_node_hour if line.flavor else Decimal(0)


def rates_until(end: datetime) -> list[Rate]:
    """Every rate in effect before ``end``, in the order they took effect."""
    return list(Rate.objects.filter(effective_from__lt=end).order_by("effective_from", "id"))


def charges(tenant, start: datetime, end: datetime, rates: list[Rate] | None = None) -> list[Charge]:
    """The lines priced, by project (the tenant's storage last), resource and flavor,
    each part of the window that one rate priced on a charge of its own."""
    book = RateBook(start, end, rates)
    priced = []
    for piece_start, piece_end in book.pieces:
        for line in lines(tenant, piece_start, piece_end):
            rate = book.at(piece_start, line)
            quantity = line.quantity.quantize(QUANTITY, ROUND_HALF_UP)
            amount = (quantity * rate).quantize(MONEY, ROUND_HALF_UP)
            priced.append(Charge(line, piece_start, piece_end, quantity, rate, amount))
    return sorted(
        priced,
        key=lambda charge: (
            charge.line.project is None,
            charge.line.project.project_id if charge.line.project else "",
            RESOURCES.index(charge.line.resource),
            charge.line.flavor.name if charge.line.flavor else "",
            charge.start,
        ),
    )


def by_day(tenant, start: datetime, end: datetime) -> dict:
    """The charges of each UTC day of ``[start, end)`` per project (the tenant's
    storage as one of its own), each day priced by ``charges`` as the export prices a
    month. Each charge is rounded as billed, so a month's days can differ from its
    statement by a few cents; the statement is the bill."""
    rates = rates_until(end)

    def measure(first: datetime, last: datetime):
        return ((charge.line.project, charge.amount) for charge in charges(tenant, first, last, rates))

    return day_series(per_day(start, end, measure), float)


def export(principal, tenant, start: datetime, end: datetime) -> str:
    """The billing CSV of a month: one row per project, resource and rate, the tenant's
    storage on a row without project; audited as ``billing.export``.

    A month that is over is recorded at its first export (with the corrections of
    earlier months not exported yet) and answered from the record ever after; a month
    still running is usage so far, recorded nowhere. A month over before the tenant
    was onboarded had no usage: its header alone, recorded nowhere either, as any
    month back to year 1 may be asked for and each record would be a row kept for ever.
    """
    final = end <= timezone.now()
    if end <= tenant.created_at:
        body = _sheet()[0].getvalue()
    elif final:
        body = _recorded(principal, tenant, start, end)
    else:
        body = _render(tenant, start, end, [])
    audit.record(
        principal,
        "billing.export",
        target=tenant,
        details={"from": start.isoformat(), "to": end.isoformat(), "final": final},
    )
    return body


def _recorded(principal, tenant, start: datetime, end: datetime) -> str:
    with transaction.atomic():
        # One export of a tenant at a time: two first exports of a month cannot both
        # record one, nor list the same adjustment.
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
        record = BillingExport.objects.filter(tenant=tenant, period=start.date()).first()
        if record is not None:
            return record.body
        pending = list(
            BillingAdjustment.objects.filter(tenant=tenant, export__isnull=True, period__lt=start.date())
            .select_related("project")
            .order_by("created_at", "id")
        )
        body = _render(tenant, start, end, pending)
        record = BillingExport.objects.create(
            tenant=tenant,
            period=start.date(),
            body=body,
            sha256=hashlib.sha256(body.encode()).hexdigest(),
            exported_by=principal.name if principal else "platform",
        )
        BillingAdjustment.objects.filter(pk__in=[adjustment.pk for adjustment in pending]).update(
            export=record
        )
    return body


def _sheet():
    """A billing CSV with its header row, and the writer for the rows that follow."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(HEADER)
    return out, writer


def _render(tenant, start: datetime, end: datetime, adjustments: list[BillingAdjustment]) -> str:
    out, writer = _sheet()
    currency = settings.BILLING_CURRENCY
    for charge in charges(tenant, start, end):
        line = charge.line
        writer.writerow(
            [
                tenant.tenant_id,
                line.project.project_id if line.project else "",
                charge.start.isoformat(),
                charge.end.isoformat(),
                line.resource,
                line.flavor.name if line.flavor else "",
                charge.quantity,
                charge.unit,
                charge.rate,
                currency,
                charge.amount,
                "",
            ]
        )
    for adjustment in adjustments:
        corrected, following = period(f"{adjustment.period:%Y-%m}")
        writer.writerow(
            [
                tenant.tenant_id,
                adjustment.project.project_id if adjustment.project else "",
                corrected.isoformat(),
                following.isoformat(),
                "adjustment",
                "",
                "",
                "",
                "",
                currency,
                adjustment.amount,
                f"{adjustment.created_at:%Y-%m-%d}: {adjustment.reason}",
            ]
        )
    return out.getvalue()


@dataclass(frozen=True)
class StatementRow:
    """A row of a month's billing CSV, for a page to show."""

    project_id: str
    project_name: str
    resource: str
    label: str
    flavor: str
    start: datetime
    end: datetime
    quantity: Decimal | None
    unit: str
    rate: Decimal | None
    amount: Decimal
    note: str


def statement(tenant, start: datetime, end: datetime) -> tuple[list[StatementRow], BillingExport | None]:
    """The month as its export says it: the recorded bytes once the month has been
    exported, else measured now (adjustments appear only in recorded exports). The
    record comes back too, to say when it was made."""
    record = BillingExport.objects.filter(tenant=tenant, period=start.date()).first()
    body = record.body if record is not None else _render(tenant, start, end, [])
    names = dict(Project.objects.filter(tenant=tenant).values_list("project_id", "name"))
    rows = [
        StatementRow(
            project_id=row["project_id"],
            project_name=names.get(row["project_id"], row["project_id"]),
            resource=row["resource"],
            label=LABELS.get(row["resource"], row["resource"].capitalize()),
            flavor=row["flavor"],
            start=datetime.fromisoformat(row["period_start"]),
            end=datetime.fromisoformat(row["period_end"]),
            quantity=Decimal(row["quantity"]) if row["quantity"] else None,
            unit=row["unit"],
            rate=Decimal(row["rate"]) if row["rate"] else None,
            amount=Decimal(row["amount"]),
            note=row.get("note") or "",
        )
        for row in csv.DictReader(io.StringIO(body))
    ]
    return rows, record


def csv_response(body: str, tenant, start: datetime) -> HttpResponse:
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="gpuaas-{tenant.tenant_id}-{start:%Y-%m}.csv"'
    return response
