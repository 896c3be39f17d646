"""Metered usage over a time window (CONTRACT.md ``GET /api/metering/usage``,
decision 0028).

Usage is measured from what the platform records as it happens: an allocation is
used from its ``activated_at`` until its ``finished_at`` (released or failed), or
until now while it lasts; a tenant's storage directory from its creation, at its
size it had at each moment (its resizes are kept). A window's usage is the part of
each of those intervals inside the window, so any window can be asked, a past
window's answer does not change, and the pieces of a window add up to the whole
exactly: usage is kept in unit-seconds (exact decimals) and turned into hours only to
be shown. Pricing and the export are ``apps.metering.billing``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import DurationField, ExpressionWrapper, F, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.allocations.models import Allocation
from apps.catalog.models import Flavor
from apps.core.errors import ValidationFailed
from apps.metering import utilization
from apps.metering.models import Rate
from apps.storage.models import TenantStorage
from apps.tenancy.models import Project

RESOURCES = ("gpu_hours", "cpu_hours", "node_hours", "cluster_hours", "storage_gb_hours")
LABELS = dict(Rate.Resource.choices)
HOUR = Decimal(3600)
QUANTITY = Decimal("0.0001")


@dataclass(frozen=True)
class Line:
    """One billable line: a project's (or, for storage, the tenant's) use of one
    resource, node-hours per flavor."""

    project: Project | None
    resource: str
    seconds: Decimal  # unit-seconds (GPU-seconds, GB-seconds, ...), exact
    flavor: Flavor | None = None

    @property
    def quantity(self) -> Decimal:
        return self.seconds / HOUR


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
        # OverflowError: 9999-12 ends past the last date Python holds.
        following = (first + timedelta(days=32)).replace(day=1)
    except (ValueError, OverflowError):
        raise ValidationFailed(details={"period": ["Give a month as YYYY-MM."]}) from None
    return first, following


def lines(tenant, start: datetime, end: datetime) -> list[Line]:
    """The tenant's usage in ``[start, end)``, as billable lines (none for what is 0)."""
    until = min(end, timezone.now())
    if until <= start:
        return []
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
        seconds = _seconds(row["node"])
        per_flavor[project, flavor] = per_flavor.get((project, flavor), Decimal(0)) + seconds
        sums = per_project.setdefault(project, {"gpu_hours": Decimal(0), "cpu_hours": Decimal(0)})
        sums["gpu_hours"] += seconds * row["gpus"]
        sums["cpu_hours"] += seconds * flavor.cpu_cores
    found = [
        Line(project, "node_hours", seconds, flavor) for (project, flavor), seconds in per_flavor.items()
    ]
    for project, sums in per_project.items():
        found.extend(Line(project, resource, seconds) for resource, seconds in sums.items())
    found.append(Line(None, "storage_gb_hours", _storage_seconds(tenant, start, until)))
    return [line for line in found if line.seconds > 0]


def _storage_seconds(tenant, start: datetime, until: datetime) -> Decimal:
    """GB-seconds of the tenant's directory in ``[start, until)`` at the quota it had at
    each moment: before a resize, the size it was resized from."""
    storage = (
        TenantStorage.objects.filter(tenant=tenant, created_at__lt=until)
        .exclude(status=TenantStorage.Status.FAILED)
        .first()
    )
    if storage is None:
        return Decimal(0)
    resizes = storage.resizes.filter(resized_at__gt=start, resized_at__lt=until).order_by("resized_at", "id")
    since = max(start, storage.created_at)
    total, size = Decimal(0), None
    for resize in resizes:
        if size is None:
            size = resize.from_gb
        if resize.resized_at > since:
            total += _seconds(resize.resized_at - since) * size
            since = resize.resized_at
        size = resize.to_gb
    if size is None:
        # No resize inside the window: the size it had then is the one it was resized
        # from next, or, without a later resize, the size it has now.
        later = storage.resizes.filter(resized_at__gte=until).order_by("resized_at", "id").first()
        size = later.from_gb if later else storage.quota_gb
    return total + _seconds(until - since) * size if until > since else total


def _seconds(duration: timedelta | None) -> Decimal:
    """Exact: whole seconds and microseconds, never through a float."""
    if not duration:
        return Decimal(0)
    return Decimal(duration.days * 86400 + duration.seconds) + Decimal(duration.microseconds).scaleb(-6)


def by_project(tenant, start: datetime, end: datetime) -> list[dict]:
    """Usage per project, each resource in hours (storage in GB-hours), with the GPU
    utilization monitoring measured (``apps.metering.utilization``; null without a
    measurement); the tenant's storage, which no project owns, in a line of its own
    with ``project_id`` null."""
    totals: dict[Project | None, dict[str, Decimal]] = {
        project: dict.fromkeys(RESOURCES, Decimal(0))
        for project in Project.objects.filter(tenant=tenant).order_by("project_id")
    }
    for line in lines(tenant, start, end):
        totals.setdefault(line.project, dict.fromkeys(RESOURCES, Decimal(0)))[line.resource] += line.seconds
    measured = utilization.measured(tenant, start, end)
    return [
        {
            "project_id": project.project_id if project else None,
            "name": project.name if project else "Tenant storage",
            **{resource: _hours(seconds) for resource, seconds in amounts.items()},
            "gpu_utilization": measured.get(project.pk) if project else None,
        }
        for project, amounts in totals.items()
    ]


def per_day(start: datetime, end: datetime, measure) -> dict:
    """Each UTC day of ``[start, end)`` measured as a window of its own by
    ``measure(first, last)``, an iterable of ``(project, amount)`` (project None: the
    tenant's storage), as ``{"days": [...], "projects": {project: [amount a day]}}``."""
    days, day = [], start
    while day < end:
        days.append(day)
        day += timedelta(days=1)
    amounts: dict[Project | None, list[Decimal]] = {}
    for index, first in enumerate(days):
        for project, amount in measure(first, min(first + timedelta(days=1), end)):
            amounts.setdefault(project, [Decimal(0)] * len(days))[index] += amount
    return {"days": days, "projects": amounts}


def day_series(measured: dict, convert) -> dict:
    """``per_day``'s answer as the portal's charts read it: ISO dates, and a series of
    ``convert(amount)`` per project, by project id, the tenant's storage last."""
    ordered = sorted(measured["projects"].items(), key=lambda item: (item[0] is None, _key(item[0])))
    return {
        "days": [first.date().isoformat() for first in measured["days"]],
        "projects": [
            {
                "project_id": project.project_id if project else None,
                "name": project.name if project else "Tenant storage",
                "values": [convert(amount) for amount in amounts],
            }
            for project, amounts in ordered
        ],
    }


def _key(project: Project | None) -> str:
    return project.project_id if project else ""


def by_day(tenant, start: datetime, end: datetime, resource: str = "gpu_hours") -> dict:
    """One resource's use per project for each UTC day of ``[start, end)``, in hours:
    each day is a window measured by ``lines`` as the usage API measures any window, so
    the days add up to the whole. Projects without any use in the window are left out."""

    def measure(first: datetime, last: datetime):
        return (
            (line.project, line.seconds)
            for line in lines(tenant, first, last)
            if line.resource == resource and line.project is not None
        )

    return day_series(per_day(start, end, measure), _hours)


def _hours(seconds: Decimal) -> float:
    """Unit-seconds as the usage API shows them: hours, to four decimals."""
    return float((seconds / HOUR).quantize(QUANTITY))
