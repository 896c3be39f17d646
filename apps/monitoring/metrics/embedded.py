"""The embedded metrics store: GPU readings in the platform's own database
(``GpuSample``), for deployments without a time-series database.

Readings arrive every ``GPUAAS_METRICS_INTERVAL_SECONDS`` from each agent and are
averaged into one row per GPU and minute as they come. ``rollup`` folds finished
minutes into 5-minute and hourly rows; ``prune`` drops rows past their keep, so a
week of 1-minute rows never piles up: minutes are kept a day, 5-minute rows a
week, hourly rows the whole retention (``GPUAAS_METRICS_RETENTION_DAYS``), each
capped by the retention. A range query reads the coarsest resolution that is
still at least as fine as its step and kept as far back as its start.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import groupby
from operator import itemgetter

from django.conf import settings
from django.db import connection
from django.db.models import Avg, F, FloatField, Func, IntegerField, Max, Min
from django.db.models.expressions import ExpressionWrapper

from apps.monitoring.metrics.base import METRICS, Reading, Series
from apps.monitoring.models import GpuSample

MINUTE, FIVE_MINUTES, HOUR = 60, 300, 3600
DAY = 86400
# Each resolution, how long it is kept at most, and what it is rolled up from; a
# rollup recomputes a little of what it did last time, so late readings still count.
KEEP_SECONDS = {MINUTE: DAY, FIVE_MINUTES: 7 * DAY, HOUR: None}
ROLLUPS = ((FIVE_MINUTES, MINUTE, 3 * FIVE_MINUTES), (HOUR, FIVE_MINUTES, 2 * HOUR))
INSTANT_LOOKBACK_SECONDS = 300
VALUES = ("utilization", "memory_used", "memory_free", "temperature", "power")

_TABLE = GpuSample._meta.db_table
_COLUMNS = ", ".join(VALUES)
# Both statements are built from this module's constants; values go as parameters.
# Insert a minute's readings, or average them into its row. The WHERE makes a retried
# report (same newest reading) a no-op, so the agent's retries never count twice.
_INSERT = f"INSERT INTO {_TABLE} (node_id, gpu, uuid, resolution, ts, count, last_ts, {_COLUMNS})"
_UPSERT_INTO = _INSERT + " VALUES "
_UPSERT_ROW = f"(%s, %s, %s, {MINUTE}, %s, %s, %s, {', '.join(['%s'] * len(VALUES))})"
# PostgreSQL reads the rows from one array a column, whose WHERE sets synchronous_commit
# for this statement's own transaction. Arrays, not a VALUES list: the driver parsed
# that list's placeholders in Python on every call, 8 ms of CPU for a report of 512
# readings (2 ms now; 0.39 and 0.30 ms for 8, 2026-11-29); this text is parsed once.
_PG_ARRAYS = ", ".join(
    ["%s::int[]", "%s::text[]", "%s::bigint[]", "%s::int[]"] + ["%s::float8[]"] * (1 + len(VALUES))
)
_PG_UPSERT = (
    f"{_INSERT} SELECT %s::uuid, gpu, uuid, {MINUTE}, ts, count, last_ts, {_COLUMNS}"  # noqa: S608
    f" FROM unnest({_PG_ARRAYS}) AS reading (gpu, uuid, ts, count, last_ts, {_COLUMNS})"
    " WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL"
)
_MERGED = ", ".join(
    f"{v} = ({_TABLE}.{v} * {_TABLE}.count + excluded.{v} * excluded.count) "
    f"/ ({_TABLE}.count + excluded.count)"
    for v in VALUES
)
_UPSERT_MERGE = f"""
ON CONFLICT (node_id, resolution, ts, gpu) DO UPDATE SET
  {_MERGED},
  count = {_TABLE}.count + excluded.count, last_ts = excluded.last_ts, uuid = excluded.uuid
WHERE {_TABLE}.last_ts < excluded.last_ts
"""
_ROLLUP = f"""
INSERT INTO {_TABLE} (node_id, gpu, uuid, resolution, ts, count, last_ts, {_COLUMNS})
SELECT node_id, gpu, MAX(uuid), %(target)s, (ts / %(target)s) * %(target)s, SUM(count), MAX(last_ts),
  {", ".join(f"SUM({v} * count) / SUM(count)" for v in VALUES)}
FROM {_TABLE}
WHERE resolution = %(source)s AND ts >= %(since)s AND ts < %(until)s
GROUP BY node_id, gpu, (ts / %(target)s) * %(target)s
ON CONFLICT (node_id, resolution, ts, gpu) DO UPDATE SET
  {", ".join(f"{v} = excluded.{v}" for v in VALUES)},
  count = excluded.count, last_ts = excluded.last_ts, uuid = excluded.uuid
"""  # noqa: S608


def write(node_id, readings: Iterable[dict]) -> int:
    """Store one node's readings (``gpu``, ``uuid``, ``at`` unix seconds and the
    ``VALUES``); how many were given."""
    node_key = GpuSample._meta.get_field("node").get_db_prep_value(node_id, connection)
    # One row per GPU and minute: a statement may not update the same row twice.
    minutes: dict[tuple[int, int], list[dict]] = {}
    for r in readings:
        minutes.setdefault((r["gpu"], int(r["at"]) // MINUTE * MINUTE), []).append(r)
    rows = [
        (
            gpu,
            group[-1]["uuid"],
            ts,
            len(group),
            max(float(r["at"]) for r in group),
            *(sum(float(r[value]) for r in group) / len(group) for value in VALUES),
        )
        for (gpu, ts), group in minutes.items()
    ]
    if rows and connection.vendor == "postgresql":
        # One statement that also commits without waiting for the WAL flush (decision
        # 0050): readings, not records, may lose their last second in a crash.
        with connection.cursor() as cursor:
            cursor.execute(_PG_UPSERT + _UPSERT_MERGE, [node_key, *map(list, zip(*rows, strict=True))])
    elif rows:
        statement = _UPSERT_INTO + ", ".join([_UPSERT_ROW] * len(rows)) + _UPSERT_MERGE
        with connection.cursor() as cursor:
            cursor.execute(statement, [value for one in rows for value in (node_key, *one)])
    return sum(len(group) for group in minutes.values())


def rollup(now: float | None = None) -> None:
    """Fold finished minutes into 5-minute rows and those into hourly rows. Each
    round starts a little before the newest row it made last time, so readings
    that came late still count and a round missed (beat down) is caught up; a
    bucket is recomputed whole, so running it twice changes nothing."""
    now = time.time() if now is None else now
    with connection.cursor() as cursor:
        for target, source, lookback in ROLLUPS:
            until = int(now) // target * target
            done = GpuSample.objects.filter(resolution=target).aggregate(last=Max("ts"))["last"]
            if done is None:
                done = GpuSample.objects.filter(resolution=source).aggregate(first=Min("ts"))["first"]
                if done is None:
                    continue
                done += lookback
            since = (done - lookback) // target * target
            cursor.execute(_ROLLUP, {"target": target, "source": source, "since": since, "until": until})


def keep_seconds(resolution: int) -> int:
    retention = settings.METRICS_RETENTION_DAYS * DAY
    cap = KEEP_SECONDS[resolution]
    return retention if cap is None else min(cap, retention)


def prune(now: float | None = None) -> int:
    """Drop rows past their keep; how many."""
    now = time.time() if now is None else now
    deleted = 0
    for resolution in KEEP_SECONDS:
        deleted += GpuSample.objects.filter(
            resolution=resolution, ts__lt=int(now) - keep_seconds(resolution)
        ).delete()[0]
    return deleted


def resolution_for(step: int, start: int, now: float | None = None) -> int:
    now = time.time() if now is None else now
    fitting = [r for r in KEEP_SECONDS if r <= step and now - keep_seconds(r) <= start]
    if fitting:
        return max(fitting)
    kept = [r for r in KEEP_SECONDS if now - keep_seconds(r) <= start]
    return min(kept) if kept else HOUR


class EmbeddedSource:
    def range(self, metrics: list[str], node_ids: list[str], start: int, end: int, step: int) -> list[Series]:
        if not node_ids:
            return []
        resolution = resolution_for(step, start)
        rows = GpuSample.objects.filter(
            node_id__in=node_ids, resolution=resolution, ts__gt=start - step, ts__lte=end
        )
        if step == resolution:
            # A point is one row (rows sit at multiples of their resolution, one a GPU):
            # nothing to average.
            points = rows.annotate(t=F("ts"), gpu_uuid=F("uuid"), **_rounded(F, metrics))
        else:
            # The point at t is the mean of the buckets that start in (t - step, t].
            bucket = ExpressionWrapper((F("ts") + (step - 1)) / step * step, output_field=IntegerField())
            points = (
                rows.annotate(t=bucket)
                .values("node_id", "gpu", "t")
                .annotate(gpu_uuid=Max("uuid"), **_rounded(Avg, metrics))
            )
        points = points.order_by("node_id", "gpu", "t").values_list(
            "node_id", "gpu", "t", "gpu_uuid", *(f"avg_{m}" for m in metrics)
        )
        sql, params = points.query.sql_with_params()
        # A tenant's day is millions of points: read them as the driver gives them,
        # without the ORM's per-value converters, as (node, gpu, uuid, times, *values).
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                # One row a series, its points as arrays: the driver builds 800 rows of
                # arrays several times faster than 1.15 M rows of 8 values.
                columns = ("t", *(f"avg_{m}" for m in metrics))
                arrays = ", ".join(f"array_agg({column} ORDER BY t)" for column in columns)
                cursor.execute(
                    f"SELECT node_id, gpu, (array_agg(gpu_uuid ORDER BY t DESC))[1], {arrays} "  # noqa: S608
                    f"FROM ({sql}) AS point GROUP BY node_id, gpu ORDER BY node_id, gpu",
                    params,
                )
                found = cursor.fetchall()
            else:
                cursor.execute(sql, params)
                found = []
                for _, group in groupby(cursor.fetchall(), key=itemgetter(0, 1)):
                    node_keys, gpus, times, uuids, *values = zip(*group, strict=True)
                    found.append((node_keys[0], gpus[0], uuids[-1], times, *values))
        node_field = GpuSample._meta.get_field("node")
        return [
            # Each metric's points as (t, value) pairs by zip: a C loop, where a Python
            # loop over 4.6 M points took seconds.
            Series(
                str(node_field.to_python(node_key)), gpu, uuid, metric, list(zip(times, values, strict=True))
            )
            for node_key, gpu, uuid, times, *columns in found
            for metric, values in zip(metrics, columns, strict=True)
        ]

    def instant(self, metric: str, node_ids: list[str] | None = None) -> list[Reading]:
        column = METRICS[metric].column
        recent = GpuSample.objects.filter(
            resolution=MINUTE, ts__gte=int(time.time()) - INSTANT_LOOKBACK_SECONDS
        )
        if node_ids is not None:
            recent = recent.filter(node_id__in=node_ids)
        latest: dict[tuple, Reading] = {}
        for node_id, gpu, uuid, last_ts, value in recent.order_by("ts").values_list(
            "node_id", "gpu", "uuid", "last_ts", column
        ):
            latest[(node_id, gpu)] = Reading(str(node_id), gpu, uuid, metric, last_ts, value)
        return list(latest.values())


def _rounded(value, metrics: list[str]) -> dict:
    """``avg_{metric}``: ``value`` of each metric's column, to 3 decimals in floating
    point (Django's Round goes through numeric, which cost seconds on a day of rows)."""
    return {
        f"avg_{m}": Func(value(METRICS[m].column) * 1000, function="ROUND", output_field=FloatField()) / 1000
        for m in metrics
    }
