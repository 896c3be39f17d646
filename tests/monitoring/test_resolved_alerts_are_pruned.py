"""Resolved alerts are deleted by the hourly monitoring trim once resolved over
GPUAAS_ALERT_RETENTION_DAYS (90) ago, whichever metrics store is in use; open ones
stay however old, and what was delivered about a deleted alert stays as sent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.monitoring.alerts import delivery
from apps.monitoring.models import Alert, AlertRule
from apps.monitoring.tasks import prune_metrics
from apps.webhooks.models import Delivery
from celery_worker.schedule import beat_schedule

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]

State = Alert.State


def alert(tenant, subject: str, state: str, *, days_ago: int) -> Alert:
    """An alert of ``tenant`` that started ``days_ago`` and, when resolved, resolved then."""
    when = timezone.now() - timedelta(days=days_ago)
    return Alert.objects.create(
        rule=AlertRule.objects.get(name="quota_warning"),
        subject=f"{tenant.pk}:{subject}",
        state=state,
        severity="warning",
        tenant=tenant,
        value=85,
        threshold=80,
        summary=f"{subject} quota above 80 %",
        pending_since=when,
        last_breach_at=when,
        started_at=None if state == State.PENDING else when,
        resolved_at=when if state == State.RESOLVED else None,
    )


def test_resolved_alerts_past_their_retention_are_deleted_and_open_ones_kept(
    tenant, settings, api, ccp_issuer
):
    settings.METRICS_URL = "http://metrics.invalid:8428"  # alerts are the platform's either way
    settings.CCP_WEBHOOK_URL = "https://ccp.example"
    settings.CCP_WEBHOOK_SECRET = "a-long-enough-secret-0123"
    old = alert(tenant, "gpus", State.RESOLVED, days_ago=91)
    [sent] = delivery.send(old, [])
    kept = {
        alert(tenant, "nodes", State.RESOLVED, days_ago=89).pk,
        alert(tenant, "gpus", State.FIRING, days_ago=400).pk,
        alert(tenant, "storage", State.PENDING, days_ago=400).pk,
    }

    assert prune_metrics() == 1
    assert set(Alert.objects.values_list("pk", flat=True)) == kept
    assert str(old.pk) in Delivery.objects.get(pk=sent.pk).body

    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token({'roles': ['GPUaaS Platform Integration']})}"
    )
    listed = api.get("/api/alerts", {"tenant_id": "acme", "state": "resolved"})
    assert [a["summary"] for a in listed.json()["results"]] == ["nodes quota above 80 %"]

    [entry] = [e for e in beat_schedule().values() if e["task"] == prune_metrics.name]
    assert entry["schedule"] == 3600.0
