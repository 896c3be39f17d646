"""The fleet as operators watch it: firing alerts, the GPUs by temperature band,
the open XID events by code.

Temperatures are read through ``metrics.source()``, the same service the metrics
API and the alert rules read, never a second query path; the band edges are the
``gpu_temperature`` rules' own thresholds, so a band means what the alerts mean.
"""

from __future__ import annotations

from django.db.models import Count, Sum

from apps.monitoring import metrics, xid
from apps.monitoring.models import Alert, AlertRule, XidEvent

# Below this a GPU is cool (idle or lightly loaded); the rules start where the heat is.
COOL_BELOW = 60.0
# The shipped rules' thresholds (migration 0003), for a fleet whose rules were deleted.
SHIPPED_THRESHOLDS = {"warning": 80.0, "critical": 90.0}


def firing_alert_count() -> int:
    return Alert.objects.filter(state=Alert.State.FIRING).count()


def temperature_bands() -> dict:
    """Every reporting GPU's latest temperature, counted into four bands:
    ``{"bands": [{"band", "label", "gpus"}], "gpus": total}``."""
    thresholds = dict(SHIPPED_THRESHOLDS)
    thresholds.update(AlertRule.objects.filter(metric="gpu_temperature").values_list("severity", "threshold"))
    warning, critical = thresholds["warning"], thresholds["critical"]
    edges = [
        ("cool", f"under {COOL_BELOW:g} °C", COOL_BELOW),
        ("normal", f"{COOL_BELOW:g} to {warning:g} °C", warning),
        ("warning", f"{warning:g} to {critical:g} °C", critical),
    ]
    counts = dict.fromkeys([band for band, _, _ in edges] + ["critical"], 0)
    readings = metrics.source().instant("temperature")
    for reading in readings:
        # A rule fires above its threshold: a GPU exactly at it is still in the band below.
        band = next((band for band, _, upper in edges if reading.value <= upper), "critical")
        counts[band] += 1
    labels = [(band, label) for band, label, _ in edges] + [("critical", f"over {critical:g} °C")]
    return {
        "bands": [{"band": band, "label": label, "gpus": counts[band]} for band, label in labels],
        "gpus": len(readings),
    }


def open_xid_counts() -> list[dict]:
    """The open XID events by code, worst first: ``code``, ``severity``,
    ``description``, ``gpus`` (events: one per GPU) and ``occurrences``."""
    rows = (
        XidEvent.objects.filter(resolved_at__isnull=True)
        .values("code")
        .annotate(gpus=Count("id"), occurrences=Sum("occurrences"))
        .order_by("code")
    )
    found = []
    for row in rows:
        known = xid.classify(row["code"])
        found.append({**row, "severity": known.severity, "description": known.description})
    rank = {"critical": 0, "warning": 1, "info": 2}
    return sorted(found, key=lambda row: (rank.get(row["severity"], 3), -row["occurrences"], row["code"]))
