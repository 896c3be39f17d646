"""Metered usage over a time window, and the billing export (CONTRACT.md
``GET /api/metering/usage`` and ``GET /api/metering/export/csv``, decision 0028).

Usage is measured from what the platform records as it happens: an allocation is
used from its ``activated_at`` until its ``finished_at`` (released or failed), or
until now while it lasts; a tenant's storage directory from its creation, at its
quota. A window's usage is the part of each of those intervals inside the window,
so any window can be asked, and a past window's answer does not change.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import DurationField, ExpressionWrapper, F, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least
from django.http import HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.allocations.models import Allocation
from apps.catalog.models import Flavor
from apps.core import audit
from apps.core.errors import ValidationFailed
from apps.metering.models import Rate
from apps.storage.models import TenantStorage
from apps.tenancy.models import Project

RESOURCES = ("gpu_hours", "cpu_hours", "node_hours", "cluster_hours", "storage_gb_hours")
LABELS = {"node_hours": "Node-hours", **dict(Rate.Resource.choices)}
HOUR = Decimal(3600)
QUANTITY = Decimal("0.0001")
MONEY = Decimal("0.01")


@dataclass(frozen=True)
class Line:
    """One billable line: a project's (or, for storage, the tenant's) use of one
    resource, node-hours per flavor."""

    project: Project | None
    resource: str
    quantity: Decimal
    flavor: Flavor | None = None


def window(start: str | None, end: str | None) -> tuple[datetime, datetime]:
    """``from`` and ``to`` (ISO 8601 with a time zone, or a date: its midnight UTC)."""
    errors, bounds = {}, {}
    for name, text in (("from", start), ("to", end)):
        moment = _moment(text)
        if moment is None:
            errors[name] = [
                "Give a date or a time with its zone, ISO 8601 (2026-11-01 or 2026-11-01T00:00:00Z)."
            ]
        bounds[name] = moment
    if not errors and bounds["from"] >= bounds["to"]:
        errors["to"] = ["Must be after 'from'."]
    if errors:
        raise ValidationFailed(details=errors)
    return bounds["from"], bounds["to"]


def _moment(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = parse_datetime(text) or (datetime.fromisoformat(text) if len(text) == 10 else None)
    except ValueError:
        return None
    if moment is None:
        return None
    if timezone.is_naive(moment):
        if len(text) != 10:
            return None  # a time without its zone is ambiguous
        moment = moment.replace(tzinfo=UTC)
    return moment


def period(text: str | None) -> tuple[datetime, datetime]:
    """A billing period, ``YYYY-MM``: that month in UTC."""
    try:
        first = datetime.strptime(text or "", "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise ValidationFailed(details={"period": ["Give a month as YYYY-MM."]}) from None
    following = (first + timedelta(days=32)).replace(day=1)
    return first, following


def lines(tenant, start: datetime, end: datetime) -> list[Line]:
    """The tenant's usage in ``[start, end)``, as billable lines (none for what is 0)."""
    until = min(end, timezone.now())
    found: list[Line] = []
    if until <= start:
        return found
    used = ExpressionWrapper(
        Least(Value(until), Coalesce("finished_at", Value(until)))
        - Greatest(Value(start), F("activated_at")),
        output_field=DurationField(),
    )
    # Durations are summed in SQL and multiplied by GPUs and cores here: SQLite (the
    # embedded default) cannot multiply a duration in a query.
    rows = list(
        Allocation.objects.filter(tenant=tenant, activated_at__isnull=False, activated_at__lt=until)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .annotate(used=used)
        .values("project_id", "flavor_id", "gpus")
        .annotate(node=Sum("used"))
        .order_by()
    )
    projects = Project.objects.in_bulk({row["project_id"] for row in rows})
    flavors = Flavor.objects.in_bulk({row["flavor_id"] for row in rows})
    # Node-hours per flavor (each has its price); GPU- and CPU-hours per project.
    per_flavor: dict[tuple[Project, Flavor], Decimal] = {}
    per_project: dict[Project, dict[str, Decimal]] = {}
    for row in rows:
        project, flavor = projects[row["project_id"]], flavors[row["flavor_id"]]
        hours = _hours(row["node"])
        per_flavor[project, flavor] = per_flavor.get((project, flavor), Decimal(0)) + hours
        sums = per_project.setdefault(project, {"gpu_hours": Decimal(0), "cpu_hours": Decimal(0)})
        sums["gpu_hours"] += hours * row["gpus"]
        sums["cpu_hours"] += hours * flavor.cpu_cores
    found.extend(
        Line(project, "node_hours", hours, flavor) for (project, flavor), hours in per_flavor.items()
    )
    for project, sums in per_project.items():
        found.extend(Line(project, resource, quantity) for resource, quantity in sums.items())
    storage = (
        TenantStorage.objects.filter(tenant=tenant, created_at__lt=until)
        .exclude(status=TenantStorage.Status.FAILED)
        .first()
    )
    if storage is not None:
        held = until - max(start, storage.created_at)
        found.append(Line(None, "storage_gb_hours", _hours(held) * storage.quota_gb))
    return [line for line in found if line.quantity > 0]


def _hours(duration: timedelta | None) -> Decimal:
    if not duration:
        return Decimal(0)
    return Decimal(duration.total_seconds()) / HOUR


def by_project(tenant, start: datetime, end: datetime) -> list[dict]:
    """Usage per project, each resource in hours (storage in GB-hours); the tenant's
    storage, which no project owns, in a line of its own with ``project_id`` null."""
    totals: dict[Project | None, dict[str, Decimal]] = {
        project: dict.fromkeys(RESOURCES, Decimal(0))
        for project in Project.objects.filter(tenant=tenant).order_by("project_id")
    }
    for line in lines(tenant, start, end):
        totals.setdefault(line.project, dict.fromkeys(RESOURCES, Decimal(0)))[line.resource] += line.quantity
    return [
        {
            "project_id": project.project_id if project else None,
            "name": project.name if project else "Tenant storage",
            **{resource: float(amount.quantize(QUANTITY)) for resource, amount in amounts.items()},
        }
        for project, amounts in totals.items()
    ]


@dataclass(frozen=True)
class Charge:
    line: Line
    quantity: Decimal  # rounded as billed
    rate: Decimal
    amount: Decimal

    @property
    def unit(self) -> str:
        return "GB-hour" if self.line.resource == "storage_gb_hours" else "hour"

    @property
    def label(self) -> str:
        return LABELS[self.line.resource]


def charges(tenant, start: datetime, end: datetime) -> list[Charge]:
    """The lines priced, by project (the tenant's storage last) and resource. Node-hours
    are priced by their flavor, the other resources by ``metering.Rate`` (0 without)."""
    rates = {rate.resource: rate.rate for rate in Rate.objects.all()}
    ordered = sorted(
        lines(tenant, start, end),
        key=lambda line: (
            line.project is None,
            line.project.project_id if line.project else "",
            RESOURCES.index(line.resource),
            line.flavor.name if line.flavor else "",
        ),
    )
    priced = []
    for line in ordered:
        rate = line.flavor.rate_per_node_hour if line.flavor else rates.get(line.resource, Decimal(0))
        quantity = line.quantity.quantize(QUANTITY, ROUND_HALF_UP)
        priced.append(Charge(line, quantity, rate, (quantity * rate).quantize(MONEY, ROUND_HALF_UP)))
    return priced


def export(principal, tenant, start: datetime, end: datetime) -> str:
    """The billing CSV of ``[start, end)``: one row per project and resource, the
    tenant's storage on a row without project; audited as ``billing.export``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(
        [
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
        ]
    )
    for charge in charges(tenant, start, end):
        line = charge.line
        writer.writerow(
            [
                tenant.tenant_id,
                line.project.project_id if line.project else "",
                start.isoformat(),
                end.isoformat(),
                line.resource,
                line.flavor.name if line.flavor else "",
                charge.quantity,
                charge.unit,
                charge.rate,
                settings.BILLING_CURRENCY,
                charge.amount,
            ]
        )
    audit.record(
        principal,
        "billing.export",
        target=tenant,
        details={"from": start.isoformat(), "to": end.isoformat()},
    )
    return out.getvalue()


def csv_response(body: str, tenant, start: datetime) -> HttpResponse:
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="gpuaas-{tenant.tenant_id}-{start:%Y-%m}.csv"'
    return response
