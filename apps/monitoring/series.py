"""GPU series of a tenant, attributed by the platform's own allocation records
(CONTRACT ``GET /api/metrics/gpu/{tenant_id}``). The metrics API and the portal's
charts both answer from ``gpu_series``.

A GPU's readings belong to a tenant only while one of its allocations held the
node, from ``activated_at`` to ``finished_at`` (the span metering bills,
decision 0028). The store is asked by node; every point outside an allocation's
span is dropped here, whatever labels the store keeps, so a node released and
given to another tenant shows each tenant only its own time.
"""

from __future__ import annotations

import math
import time
import uuid
from bisect import bisect_left, bisect_right
from collections import defaultdict
from datetime import UTC, datetime
from operator import itemgetter

import msgspec
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from apps.allocations.models import Allocation
from apps.core.errors import ValidationFailed
from apps.monitoring import metrics
from apps.tenancy import policy
from apps.tenancy import selectors as tenancy
from apps.tenancy.models import Tenant
from apps.tenancy.roles import Perm

CHART_METRICS = ["utilization", "memory_used", "temperature", "power"]
DEFAULT_WINDOW_SECONDS = 3600
DEFAULT_STEP_SECONDS = 60
MAX_POINTS = 11_000
# The portal's chart windows: how far back, and the step that keeps each chart near 150 points.
CHART_WINDOWS = {"1h": (3600, 60), "24h": (86400, 600), "7d": (7 * 86400, 3600)}
_time = itemgetter(0)


def window(start: str | None, end: str | None, step: str | None) -> tuple[int, int, int]:
    """``from``, ``to`` (ISO 8601 with a zone, or unix seconds) and ``step`` (seconds),
    aligned to the step, so that both stores answer the same instants."""
    errors: dict[str, list[str]] = {}
    now = time.time()
    until = _moment(end, "to", errors) if end else now
    since = _moment(start, "from", errors) if start else (until or now) - DEFAULT_WINDOW_SECONDS
    seconds = DEFAULT_STEP_SECONDS
    if step:
        try:
            seconds = int(step)
        except ValueError:
            seconds = 0
        if seconds < 1:
            errors["step"] = ["A whole number of seconds, at least 1."]
        elif seconds >= 1e11:  # past any window (``_moment``'s bound); a float cannot divide by it
            errors["step"] = ["Longer than the window: no point would fall in it."]
    if not errors and since >= until:
        errors["to"] = ["Must be after 'from'."]
    if errors:
        raise ValidationFailed(details=errors)
    first, last = math.ceil(since / seconds) * seconds, math.floor(until / seconds) * seconds
    if first > last:
        raise ValidationFailed(details={"step": ["Longer than the window: no point would fall in it."]})
    points = (last - first) // seconds + 1
    if points > MAX_POINTS:
        raise ValidationFailed(
            f"{points} points a series is more than {MAX_POINTS}: widen the step or narrow the window.",
            details={
                "step": [
                    f"At most {MAX_POINTS} points a series; this window needs a step of at least "
                    f"{math.ceil((until - since) / (MAX_POINTS - 1))} s."
                ]
            },
        )
    return first, last, seconds


def _moment(text: str, name: str, errors: dict) -> float | None:
    try:
        value = float(text)
    except ValueError:
        try:
            moment = parse_datetime(text)
        except ValueError:  # the form of one, not a moment: February 30th, hour 25
            moment = None
        if moment is None or moment.tzinfo is None:
            errors[name] = ["ISO 8601 with a time zone (2026-11-01T00:00:00Z) or unix seconds."]
            return None
        # Bounded as unix seconds are: a zone can carry year 1 or 9999 past what a UTC date holds.
        value = moment.timestamp()
    if not math.isfinite(value) or not 0 <= value < 1e11:
        errors[name] = ["Out of range: from 1970 on, as unix seconds below 1e11."]
        return None
    return value


def attributed_allocations(principal, tenant: Tenant, start: int, end: int, **filters):
    """The allocations of ``tenant`` the caller may see that held their node in the window."""
    held = Allocation.objects.filter(tenant=tenant, activated_at__isnull=False, activated_at__lte=_utc(end))
    held = held.filter(Q(finished_at__isnull=True) | Q(finished_at__gte=_utc(start))).filter(**filters)
    return policy.restrict(held, principal, Perm.ALLOCATION_VIEW).select_related("node", "project")


def gpu_series(
    principal,
    tenant_id: str,
    *,
    start: str | None = None,
    end: str | None = None,
    step: str | None = None,
    project_id: str | None = None,
    node_id: str | None = None,
    allocation=None,
) -> dict:
    tenant = tenancy.tenant_for(principal, tenant_id)
    first, last, seconds = window(start, end, step)
    filters = {}
    if project_id:
        filters["project__project_id"] = project_id
    if node_id:
        filters["node_id"] = _node_uuid(node_id)
    if allocation is not None:
        filters["pk"] = allocation.pk
    held = attributed_allocations(principal, tenant, first, last, **filters)
    by_node = defaultdict(list)
    for one in held:
        by_node[str(one.node_id)].append(one)
    found = metrics.source().range(CHART_METRICS, list(by_node), first, last, seconds)
    series = [
        _attributed(one, allocation_held, seconds)
        for one in found
        for allocation_held in by_node.get(one.node_id, ())
    ]
    return {
        "tenant_id": tenant.tenant_id,
        "from": _utc(first).isoformat(),
        "to": _utc(last).isoformat(),
        "step": seconds,
        "series": [s for s in series if s["points"]],
    }


def _attributed(series: metrics.Series, allocation: Allocation, step: int) -> dict:
    # A point stands for the readings of the step before it (and, in the embedded
    # store, of its last minute): only points whose whole span lies inside the
    # allocation are the tenant's, so no reading of the previous or next holder leaks.
    since = allocation.activated_at.timestamp() + step
    until = allocation.finished_at.timestamp() - step if allocation.finished_at else math.inf
    # The points are in time order, so the allocation's are one slice of them, found
    # by bisection rather than by testing each of a day's 1,441 points.
    points = series.points
    first = bisect_left(points, since, key=_time)
    return {
        "node_id": series.node_id,
        "hostname": allocation.node.hostname,
        "allocation_id": str(allocation.pk),
        "project_id": allocation.project.project_id,
        "gpu": series.gpu,
        "uuid": series.uuid,
        "metric": series.metric,
        "unit": metrics.METRICS[series.metric].unit,
        "points": points[first : bisect_right(points, until, lo=first, key=_time)],
    }


def as_json(body: dict) -> bytes:
    """``gpu_series``'s answer as JSON. A tenant's day is millions of points (tens of
    MB): msgspec encodes them in C, where DRF's renderer walks them in Python."""
    return msgspec.json.encode(body)


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _node_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValidationFailed(details={"node_id": ["A node id (UUID)."]}) from None
