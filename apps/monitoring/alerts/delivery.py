"""An alert's firing or resolution as a webhook (CONTRACT "Monitoring and alerts"):
to CCP at ``{GPUAAS_CCP_WEBHOOK_URL}/ccp/webhooks/alerts`` and to every subscription
that matches, through the webhooks outbox (written in the transaction that moved
the alert, so a transition and its deliveries commit together)."""

from __future__ import annotations

import uuid

from django.conf import settings

from apps.monitoring.alerts import subscriptions
from apps.monitoring.models import Alert, AlertSubscription
from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery

CCP_PATH = "/ccp/webhooks/alerts"


def _iso(moment) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def payload(alert: Alert, event_id: str) -> dict:
    return {
        "event_id": event_id,
        "alert_id": str(alert.pk),
        "rule": alert.rule_id,
        "severity": alert.severity,
        "state": alert.state,
        "tenant_id": alert.tenant.tenant_id if alert.tenant_id else None,
        "project_id": alert.project.project_id if alert.project_id else None,
        "node_id": str(alert.node_id) if alert.node_id else None,
        "hostname": alert.hostname or None,
        "gpu": alert.gpu,
        "value": alert.value,
        "threshold": alert.threshold,
        "started_at": _iso(alert.started_at),
        "resolved_at": _iso(alert.resolved_at),
        "summary": alert.summary,
    }


def send(alert: Alert, receivers: list[AlertSubscription]) -> list[Delivery]:
    """Called inside the transaction that fired or resolved the alert; ``receivers``:
    every subscription (read once per evaluation round)."""
    body = payload(alert, str(uuid.uuid4()))
    sent = []
    if settings.CCP_WEBHOOK_URL:
        url = settings.CCP_WEBHOOK_URL.rstrip("/") + CCP_PATH
        sent.append(webhooks.enqueue(webhooks.ALERT, url, body, tenant_id=alert.tenant_id))
    for subscription in subscriptions.matching(alert, receivers):
        sent.append(
            webhooks.enqueue(
                webhooks.ALERT,
                subscription.url,
                body,
                tenant_id=alert.tenant_id,
                signer=str(subscription.pk),
                public_only=subscriptions.public_only(subscription.tenant_id),
            )
        )
    return sent
