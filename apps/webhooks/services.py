"""Outbound webhooks to CCP and alert subscribers: signed, retried with backoff and
jitter, dead-lettered.

Retry policy per event type from seed 001 section 8.2 (state change: 5 retries,
2 s to 60 s; alerts: 5 retries, 1 s to 120 s). A delivery is signed with the CCP
webhook secret, or with its ``signer``'s (an alert subscription's) through ``SIGNERS``.
A tenant's receiver (``public_only``) is reached only on a public address it
resolves to at that attempt (``receivers``); one that resolves to another is a
dead letter at once, since no retry would be allowed either.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import httpx
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core import audit, correlation, outbound, wakeups
from apps.core.errors import InvalidState
from apps.tenancy import policy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm
from apps.webhooks import receivers
from apps.webhooks.models import Delivery

logger = logging.getLogger(__name__)

STATE_CHANGE = "baremetal.state-change"
ALERT = "alert"
POLICY = {  # event type: (retries, first backoff s, max backoff s)
    STATE_CHANGE: (5, 2.0, 60.0),
    ALERT: (5, 1.0, 120.0),
}
# Event type -> function answering the secret of a delivery's ``signer`` (None: gone).
# Upper apps that sign with their own receivers' secrets fill it in AppConfig.ready().
SIGNERS: dict[str, Callable[[str], str | None]] = {}


class SignerGone(Exception):
    """The receiver whose secret signs a delivery no longer exists."""


STATE_CHANGE_PATH = "/ccp/webhooks/baremetal/state-change"
# How long a delivery is kept once it is done with: alerts that fire and resolve, each
# to CCP and to every matching subscription, would otherwise grow the table for ever.
# A tenant's receiver is the tenant's to keep up, so its dead letters go too; the
# operator's (CCP's) stay until replayed.
DELIVERED_KEPT = timedelta(days=7)
TENANT_DEAD_LETTERS_KEPT = timedelta(days=30)


def sign(secret: str, signed: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_headers(secret: str, body: bytes, timestamp: int) -> dict[str, str]:
    """``X-GPUaaS-Signature``, the HMAC of the body (CONTRACT.md, what CCP verifies
    today), and ``X-GPUaaS-Timestamp-Signature``, the HMAC of ``"{timestamp}.{body}"``
    with ``X-GPUaaS-Timestamp`` (unix seconds, fresh on every attempt): a receiver that
    checks the second can refuse a captured request replayed later."""
    return {
        "X-GPUaaS-Timestamp": str(timestamp),
        "X-GPUaaS-Signature": sign(secret, body),
        "X-GPUaaS-Timestamp-Signature": sign(secret, str(timestamp).encode() + b"." + body),
    }


def enqueue(
    event_type: str, url: str, payload: dict, *, tenant_id=None, signer: str = "", public_only: bool = False
) -> Delivery:
    """Called inside the transaction that made the event; sent once it commits.
    ``public_only``: the URL is a tenant's, not the operator's."""
    retries, _, _ = POLICY[event_type]
    delivery = Delivery.objects.create(
        signer=signer,
        event_id=payload["event_id"],
        event_type=event_type,
        url=url,
        body=json.dumps(payload, cls=DjangoJSONEncoder, separators=(",", ":")),
        correlation_id=correlation.get(),
        tenant_id=tenant_id,
        public_only=public_only,
        max_attempts=retries + 1,
        next_attempt_at=timezone.now(),
    )
    transaction.on_commit(lambda: _deliver_soon(delivery.pk))
    return delivery


def enqueue_state_change(allocation, previous_state: str) -> Delivery | None:
    """Called inside the transaction that changed the allocation's state."""
    if not settings.CCP_WEBHOOK_URL:
        return None
    payload = {
        "event_id": str(uuid.uuid4()),
        "node_id": str(allocation.node_id),
        "allocation_id": str(allocation.pk),
        "tenant_id": allocation.tenant.tenant_id,
        "project_id": allocation.project.project_id,
        "state": allocation.state,
        "previous_state": previous_state,
        "occurred_at": timezone.now().isoformat().replace("+00:00", "Z"),
        "failure_reason": allocation.failure_reason or None,
    }
    return enqueue(
        STATE_CHANGE,
        settings.CCP_WEBHOOK_URL.rstrip("/") + STATE_CHANGE_PATH,
        payload,
        tenant_id=allocation.tenant_id,
    )


def signing_secret(delivery: Delivery) -> str:
    if not delivery.signer:
        return settings.CCP_WEBHOOK_SECRET
    secret = SIGNERS[delivery.event_type](delivery.signer)
    if secret is None:
        raise SignerGone(f"the receiver {delivery.signer} no longer exists")
    return secret


def _deliver_soon(delivery_id) -> None:
    from apps.webhooks.tasks import deliver

    wakeups.wake(deliver, str(delivery_id))


def _backoff(delivery: Delivery) -> float:
    _, first, ceiling = POLICY[delivery.event_type]
    delay = min(ceiling, first * 2 ** (delivery.attempts - 1))
    return delay * random.uniform(0.5, 1.0) if settings.WEBHOOK_JITTER else delay


def _audit_dead_letter(delivery: Delivery, error: str) -> None:
    """A tenant's own receiver's dead letter is the tenant's to read. The operator's
    receivers (CCP, platform-wide subscriptions) are the platform's: a delivery made
    for a tenant's event to one of them is not, so neither its URL nor how it failed
    reaches the tenant's audit trail. A URL's user and password are never recorded."""
    own = delivery.public_only
    audit.record(
        None,
        "webhook.dead_letter",
        target_type=Delivery._meta.model_name,
        target_id=str(delivery.pk),
        tenant_id=delivery.tenant_id if own else None,
        outcome=audit.FAILURE,
        details={
            "url": str(httpx.URL(delivery.url).copy_with(username=None, password=None)),
            "error": error,
            **({} if own or delivery.tenant_id is None else {"for_tenant": str(delivery.tenant_id)}),
        },
    )


def attempt(delivery_id) -> Delivery | None:
    """One delivery attempt, claimed so two workers never send the same attempt."""
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True)
            .filter(pk=delivery_id, status=Delivery.Status.PENDING)
            .first()
        )
        if delivery is None or (delivery.next_attempt_at and delivery.next_attempt_at > now):
            return delivery
        delivery.attempts += 1
        # Hold it while we send; a crash leaves it due again after this.
        delivery.next_attempt_at = now + timedelta(seconds=settings.WEBHOOK_TIMEOUT_SECONDS * 2)
        delivery.save(update_fields=["attempts", "next_attempt_at", "updated_at"])
    body = delivery.body.encode()
    error, status_code = "", None
    try:
        headers = {
            "Content-Type": "application/json",
            "X-GPUaaS-Event": delivery.event_type,
            "X-GPUaaS-Event-Id": str(delivery.event_id),
            "X-Correlation-ID": delivery.correlation_id,
            **signature_headers(signing_secret(delivery), body, int(time.time())),
        }
        post = receivers.post if delivery.public_only else partial(httpx.post, verify=outbound.tls())
        response = post(delivery.url, content=body, headers=headers, timeout=settings.WEBHOOK_TIMEOUT_SECONDS)
        status_code = response.status_code
        if not 200 <= status_code < 300:
            error = f"receiver answered {status_code}"
    except httpx.HTTPError as exc:
        error = f"{exc.__class__.__name__}: {exc}"[:500]
    except receivers.Unresolved as exc:
        error = str(exc)[:500]
    except (SignerGone, receivers.Refused) as exc:
        # No retry could sign it, or would be let through: dead now, not after six tries.
        error, delivery.attempts = str(exc), delivery.max_attempts
    delivery.last_status_code, delivery.last_error = status_code, error
    if not error:
        delivery.status, delivery.delivered_at, delivery.next_attempt_at = (
            Delivery.Status.DELIVERED,
            timezone.now(),
            None,
        )
    elif delivery.attempts >= delivery.max_attempts:
        delivery.status, delivery.next_attempt_at = Delivery.Status.DEAD, None
        logger.error(
            "webhook %s is a dead letter after %s attempts: %s", delivery.event_id, delivery.attempts, error
        )
        _audit_dead_letter(delivery, error)
    else:
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=_backoff(delivery))
    delivery.save(
        update_fields=[
            "status",
            "attempts",
            "delivered_at",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "updated_at",
        ]
    )
    return delivery


def replay(principal: Principal, delivery: Delivery) -> Delivery:
    """Operator action: send a dead letter again, with a fresh set of retries."""
    policy.require_scope(principal, Perm.NODE_MANAGE)
    with transaction.atomic():
        changed = Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.DEAD).update(
            status=Delivery.Status.PENDING,
            attempts=0,
            next_attempt_at=timezone.now(),
            last_error="",
            updated_at=timezone.now(),
        )
        if not changed:
            raise InvalidState("Only dead letters can be replayed.")
        audit.record(principal, "webhook.replay", target=delivery, tenant_id=delivery.tenant_id)
        transaction.on_commit(lambda: _deliver_soon(delivery.pk))
    delivery.refresh_from_db()
    return delivery


def prune(now=None) -> int:
    """Delete the deliveries past their keep (above); how many."""
    now = now or timezone.now()
    done = Q(status=Delivery.Status.DELIVERED, delivered_at__lt=now - DELIVERED_KEPT) | Q(
        status=Delivery.Status.DEAD, public_only=True, updated_at__lt=now - TENANT_DEAD_LETTERS_KEPT
    )
    return Delivery.objects.filter(done).delete()[0]


def due_ids(limit: int = 200) -> list:
    return list(
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=timezone.now())
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )
