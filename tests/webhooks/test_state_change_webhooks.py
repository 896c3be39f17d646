"""State-change webhooks to CCP: outbox in the same transaction, HMAC-signed,
retried with backoff, dead-lettered after the last retry, replayable."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from django.utils import timezone

from apps.allocations import services
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from tests.support.fleet import allocated
from tests.support.receiver import WEBHOOK_SECRET

pytestmark = pytest.mark.django_db
SECRET = WEBHOOK_SECRET


def test_active_and_released_are_delivered_signed(
    receiver, allocator, project, nodes, django_capture_on_commit_callbacks
):
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        services.release(principals.for_user(allocator), allocation)
    assert [r["path"] for r in receiver.requests] == ["/ccp/webhooks/baremetal/state-change"] * 2
    first, second = (json.loads(r["body"]) for r in receiver.requests)
    assert (first["state"], first["previous_state"]) == ("ACTIVE", "PROVISIONING")
    assert (second["state"], second["previous_state"]) == ("RELEASED", "RELEASING")
    assert first["node_id"] == str(allocation.node_id)
    assert first["allocation_id"] == str(allocation.pk)
    assert first["tenant_id"] == "acme"
    assert first["project_id"] == project.project_id
    assert first["failure_reason"] is None
    assert first["occurred_at"].endswith("Z")
    headers = receiver.requests[0]["headers"]
    body = receiver.requests[0]["body"]
    # The contract's signature of the body, and the timestamped one for replay checks.
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-GPUaaS-Signature"] == f"sha256={expected}"
    stamped = hmac.new(SECRET.encode(), headers["X-GPUaaS-Timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["X-GPUaaS-Timestamp-Signature"] == f"sha256={stamped.hexdigest()}"
    assert headers["X-GPUaaS-Event"] == "baremetal.state-change"
    assert headers["X-GPUaaS-Event-Id"] == first["event_id"]
    assert headers["X-Correlation-ID"]
    assert Delivery.objects.filter(status=Delivery.Status.DELIVERED).count() == 2


def test_failed_state_carries_reason(
    receiver, allocator, project, nodes, settings, django_capture_on_commit_callbacks
):
    from tests.support.fleet import fault

    settings.PIPELINE_BACKOFF_SECONDS = (0.0, 0.0)
    fault("ndfc", "attach", message="no route to leaf", remaining=None)
    allocated(allocator, project, django_capture_on_commit_callbacks)
    [payload] = [json.loads(r["body"]) for r in receiver.requests]
    assert payload["state"] == "FAILED"
    assert "no route to leaf" in payload["failure_reason"]


def test_receiver_failing_then_succeeding_gets_it_with_the_same_event_id(
    receiver, allocator, project, nodes, django_capture_on_commit_callbacks
):
    receiver.fail_first = 2
    allocated(allocator, project, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.PENDING
    assert delivery.attempts == 1
    waits = []
    for _ in range(2):
        waits.append((delivery.next_attempt_at - timezone.now()).total_seconds())
        Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        delivery = webhooks.attempt(delivery.pk)
    assert delivery.status == Delivery.Status.DELIVERED
    assert delivery.attempts == 3
    assert 1.5 < waits[0] <= 2.0
    assert 3.5 < waits[1] <= 4.0  # exponential backoff from 2 s
    bodies = {r["body"] for r in receiver.requests}
    assert len(receiver.requests) == 3
    assert len(bodies) == 1  # the same signed bytes each time


def dead_letter(receiver, allocator, project, django_capture_on_commit_callbacks) -> Delivery:
    """An allocation's ACTIVE webhook, to a receiver that always fails, tried to the last."""
    receiver.fail_first = 100
    allocated(allocator, project, django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get()
    while delivery.status == Delivery.Status.PENDING:
        Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        delivery = webhooks.attempt(delivery.pk)
    assert delivery.status == Delivery.Status.DEAD
    return delivery


def test_dead_letter_after_last_retry_and_operator_replay(
    receiver, allocator, project, nodes, platform_admin, django_capture_on_commit_callbacks
):
    delivery = dead_letter(receiver, allocator, project, django_capture_on_commit_callbacks)
    assert delivery.attempts == 6  # first try + 5 retries
    assert "answered 500" in delivery.last_error

    receiver.fail_first = 0
    with django_capture_on_commit_callbacks(execute=True):
        webhooks.replay(principals.for_user(platform_admin), delivery)
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert len({r["headers"]["X-GPUaaS-Event-Id"] for r in receiver.requests}) == 1


def test_a_dead_letter_to_ccp_stays_out_of_the_tenants_audit_trail(
    receiver, settings, allocator, project, nodes, tenant_admin, api, django_capture_on_commit_callbacks
):
    """CCP's receiver is the operator's: its URL (here with a password in it) and how it
    failed are not the tenant's to read, though the event was the tenant's."""
    settings.CCP_WEBHOOK_URL = receiver.url.replace("http://", "http://ccp:hunter2@") + "/"
    dead_letter(receiver, allocator, project, django_capture_on_commit_callbacks)

    dead = AuditEvent.objects.get(action="webhook.dead_letter")
    assert dead.tenant_id is None
    assert dead.details["for_tenant"] == str(project.tenant_id)
    assert dead.details["url"].startswith(receiver.url + "/ccp/")  # without its user and password
    assert "hunter2" not in str(dead.details)
    api.force_login(tenant_admin)
    actions = {e["action"] for e in api.get("/api/v1/audit", {"page_size": 500}).json()["results"]}
    assert "allocation.active" in actions
    assert "webhook.dead_letter" not in actions


def test_sweeper_picks_up_due_deliveries(
    receiver, allocator, project, nodes, django_capture_on_commit_callbacks
):
    receiver.fail_first = 1
    allocated(allocator, project, django_capture_on_commit_callbacks)
    Delivery.objects.update(next_attempt_at=timezone.now())
    from apps.webhooks.tasks import sweep_due_deliveries

    assert sweep_due_deliveries() == 1
    assert Delivery.objects.get().status == Delivery.Status.DELIVERED


def test_no_webhook_url_means_no_outbox_rows(
    settings, allocator, project, nodes, django_capture_on_commit_callbacks
):
    settings.CCP_WEBHOOK_URL = ""
    allocated(allocator, project, django_capture_on_commit_callbacks)
    assert not Delivery.objects.exists()
