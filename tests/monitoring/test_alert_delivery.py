"""Alert delivery through the webhooks outbox to real local receivers: retried 5
times from 1 s, dead letters replayable, each subscription's deliveries signed with
its own secret, matched by tenant and severity; evaluation rounds raced against each
other still send each transition once."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from apps.core import secrets
from apps.monitoring.alerts import evaluation, services, subscriptions
from apps.monitoring.models import Alert, AlertSubscription
from apps.tenancy import principal as principals
from apps.tenancy.principal import OPERATOR_CLI
from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from tests.monitoring.alerting import held_fleet, received
from tests.support.concurrency import at_once
from tests.support.receiver import WebhookReceiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]
HOT = 95.0  # CPU utilization past both thresholds


@pytest.fixture
def receivers(settings):
    """Subscribers' receivers, each checking its own secret."""
    settings.ALERT_PRIVATE_URLS = True  # they listen on 127.0.0.1
    settings.WEBHOOK_JITTER = False
    made = []

    def make(secret: str, **kwargs) -> WebhookReceiver:
        server = WebhookReceiver(secret=secret, **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def hot_cpu(node, value: float = HOT) -> None:
    services.record_measurement("cpu_utilization", str(node.pk), value, node=node, label=node.hostname)


def retry_now(delivery: Delivery) -> Delivery:
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    return webhooks.attempt(delivery.pk)


def test_a_failing_receiver_gets_the_alert_on_a_retry_with_the_same_event(fleet, receiver, rounds):
    receiver.fail_first = 2
    hot_cpu(fleet[0])
    rounds.at(0)
    delivery = Delivery.objects.get(url__endswith="/ccp/webhooks/alerts", body__contains="critical")
    assert (delivery.event_type, delivery.status, delivery.attempts) == ("alert", "pending", 1)
    assert delivery.max_attempts == 6  # the first try and 5 retries
    delivery = retry_now(delivery)
    delivery = retry_now(delivery)
    assert delivery.status == Delivery.Status.DELIVERED
    critical = [r for r in receiver.requests if b"cpu_utilization_critical" in r["body"]]
    assert len(critical) == 3
    assert len({r["body"] for r in critical}) == 1
    assert all(r["headers"]["X-GPUaaS-Event"] == "alert" for r in critical)
    assert critical[-1]["verified"]
    assert critical[-1]["headers"]["X-GPUaaS-Event-Id"] == json.loads(critical[-1]["body"])["event_id"]


def test_the_backoff_runs_from_one_second_to_two_minutes(fleet, receiver, rounds):
    receiver.fail_first = 100
    hot_cpu(fleet[0])
    rounds.at(0)
    delivery = Delivery.objects.filter(body__contains="cpu_utilization_critical").get()
    waits = []
    while delivery.status == Delivery.Status.PENDING:
        waits.append(round((delivery.next_attempt_at - timezone.now()).total_seconds()))
        delivery = retry_now(delivery)
    assert waits == [1, 2, 4, 8, 16]
    assert delivery.status == Delivery.Status.DEAD
    assert delivery.attempts == 6
    assert webhooks._backoff(Delivery(event_type="alert", attempts=9)) == 120.0


def test_a_dead_letter_is_replayed_by_an_operator(
    fleet, receiver, rounds, platform_admin, django_capture_on_commit_callbacks
):
    receiver.fail_first = 100
    hot_cpu(fleet[0])
    rounds.at(0)
    delivery = Delivery.objects.filter(body__contains="cpu_utilization_critical").get()
    while delivery.status == Delivery.Status.PENDING:
        delivery = retry_now(delivery)
    assert delivery.status == Delivery.Status.DEAD
    receiver.fail_first = 0
    with django_capture_on_commit_callbacks(execute=True):
        webhooks.replay(principals.for_user(platform_admin), delivery)
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert receiver.requests[-1]["verified"]


def test_subscriptions_receive_what_matches_signed_with_their_own_secret(
    fleet, tenant, other_tenant_project, receivers, rounds
):
    acme = receivers("acme-secret-0123456789")
    acme_critical = receivers("acme-critical-0123456789")
    globex = receivers("globex-secret-0123456789")
    platform = receivers("platform-secret-0123456789")
    subscriptions.subscribe(
        OPERATOR_CLI, tenant_id="acme", url=acme.url + "/hook", secret="acme-secret-0123456789"
    )
    subscriptions.subscribe(
        OPERATOR_CLI,
        tenant_id="acme",
        url=acme_critical.url + "/hook",
        secret="acme-critical-0123456789",
        severities=["critical"],
    )
    subscriptions.subscribe(
        OPERATOR_CLI, tenant_id="globex", url=globex.url, secret="globex-secret-0123456789"
    )
    subscriptions.subscribe(OPERATOR_CLI, url=platform.url, secret="platform-secret-0123456789")

    hot_cpu(fleet[0], 80.0)  # acme's node, warning only
    hot_cpu(fleet[2], HOT)  # globex's node: critical (which holds its warning back)
    rounds.at(0)

    def rules(server):
        assert all(r["verified"] for r in server.requests)
        return sorted(json.loads(r["body"])["rule"] for r in server.requests)

    assert rules(acme) == ["cpu_utilization_warning"]
    assert rules(acme_critical) == []
    assert rules(globex) == ["cpu_utilization_critical"]
    assert rules(platform) == ["cpu_utilization_critical", "cpu_utilization_warning"]
    assert acme.requests[0]["path"] == "/hook"


def test_a_subscription_deleted_before_its_delivery_leaves_a_dead_letter(fleet, receivers, rounds, tenant):
    gone = receivers("gone-secret-0123456789", fail_first=1)
    subscription = subscriptions.subscribe(
        OPERATOR_CLI, tenant_id="acme", url=gone.url, secret="gone-secret-0123456789"
    )
    hot_cpu(fleet[0])
    rounds.at(0)
    subscriptions.unsubscribe(OPERATOR_CLI, subscription.pk)
    [delivery] = Delivery.objects.filter(signer=str(subscription.pk), body__contains="critical")
    delivery = retry_now(delivery)
    assert delivery.status == Delivery.Status.DEAD
    assert "no longer exists" in delivery.last_error


def test_the_test_send_reaches_only_that_subscription(receivers, tenant, django_capture_on_commit_callbacks):
    mine = receivers("mine-secret-0123456789")
    other = receivers("other-secret-0123456789")
    subscription = subscriptions.subscribe(
        OPERATOR_CLI, tenant_id="acme", url=mine.url, secret="mine-secret-0123456789"
    )
    subscriptions.subscribe(OPERATOR_CLI, tenant_id="acme", url=other.url, secret="other-secret-0123456789")
    with django_capture_on_commit_callbacks(execute=True):
        subscriptions.test_send(OPERATOR_CLI, subscription.pk)
    [sent] = mine.requests
    assert sent["verified"]
    assert json.loads(sent["body"])["rule"] == "test"
    assert other.requests == []


def test_the_subscription_secret_lives_in_the_secrets_store(tenant, settings):
    settings.ALERT_PRIVATE_URLS = True
    subscription = subscriptions.subscribe(
        OPERATOR_CLI, tenant_id="acme", url="http://127.0.0.1:9/", secret="plain-secret-0123456789"
    )
    assert "plain-secret" not in str(AlertSubscription.objects.filter(pk=subscription.pk).values().get())
    assert secrets.store().read(subscription.secret_path) == "plain-secret-0123456789"
    assert subscriptions.signing_secret(str(subscription.pk)) == "plain-secret-0123456789"


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_rounds_raced_against_each_other_send_each_transition_once(
    project, other_tenant_project, flavor, receiver
):
    fleet = held_fleet(project, other_tenant_project, flavor)
    hot_cpu(fleet[0])
    moment = timezone.now()
    at_once([lambda: evaluation.evaluate(moment) for _ in range(4)])
    at_once([lambda: evaluation.evaluate(moment) for _ in range(4)])
    assert [b["rule"] for b in received(receiver)] == ["cpu_utilization_critical"]
    assert Alert.objects.filter(state="firing").count() == 1
