"""A tenant's alert receiver cannot be used to reach the platform's own network: a
name answering a loopback, private, link-local or metadata address when a delivery
is made (though it answered a public one when the tenant subscribed: DNS
rebinding) is a dead letter at once, and the delivery connects to the address it
checked, whatever the name answers next. Literal private addresses are refused
when subscribing. Networks the operator allows are delivered to, as the
operator's own CCP URL always is (tests/webhooks/test_state_change_webhooks.py
delivers to it on loopback). Real receivers on loopback; the tests play DNS
through ``settings.WEBHOOK_RESOLVER``."""

from __future__ import annotations

import socket

import pytest

from apps.core.models import AuditEvent
from apps.webhooks.models import Delivery
from tests.support.receiver import WebhookReceiver

pytestmark = pytest.mark.django_db
SECRET = "acme-receiver-secret-0123"
PUBLIC = "93.184.215.14"


class Dns:
    """Each name's answers in turn, the last one from then on; who asked."""

    def __init__(self, **answers: list[list[str]]):
        self.answers = {name.replace("_", "."): list(seq) for name, seq in answers.items()}
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        answers = self.answers.get(host)
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def receiver_on_loopback(settings):
    settings.WEBHOOK_JITTER = False
    settings.ALERT_PRIVATE_URLS = False
    made = []

    def make(**kwargs) -> WebhookReceiver:
        made.append(WebhookReceiver(secret=SECRET, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


@pytest.fixture
def tenant_api(api, tenant_admin):
    api.force_login(tenant_admin)
    return api


def subscribe(api, url: str):
    return api.post("/api/alerts/subscribe", {"url": url, "secret": SECRET}, format="json")


def send_test_alert(api, subscription_id, django_capture_on_commit_callbacks) -> Delivery:
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/alerts/subscriptions/{subscription_id}/test")
    assert response.status_code in (200, 201, 202), response.content
    return Delivery.objects.get(signer=str(subscription_id))


@pytest.mark.parametrize(
    "later",
    [
        ["127.0.0.1"],
        ["169.254.169.254"],
        ["10.1.2.3"],
        [PUBLIC, "192.168.0.7"],
        ["::ffff:127.0.0.1"],
        ["2002:a00:5::1"],
    ],
    ids=["loopback", "metadata", "private", "one-private-among-public", "mapped-loopback", "6to4-private"],
)
def test_a_name_rebound_to_an_internal_address_is_a_dead_letter_at_once(
    later, settings, tenant_api, receiver_on_loopback, django_capture_on_commit_callbacks
):
    internal = receiver_on_loopback()
    settings.WEBHOOK_RESOLVER = dns = Dns(hooks_acme_example=[[PUBLIC], later])
    response = subscribe(tenant_api, f"http://hooks.acme.example:{internal.port}/alerts")
    assert response.status_code == 201, response.content

    delivery = send_test_alert(tenant_api, response.json()["id"], django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.DEAD  # no retries: none would be let through
    assert delivery.last_error.startswith("refused: hooks.acme.example resolves to ")
    assert delivery.last_status_code is None
    assert internal.requests == []
    assert dns.asked == ["hooks.acme.example"] * 2
    dead = AuditEvent.objects.get(action="webhook.dead_letter")
    assert "refused" in dead.details["error"]
    # Not what it resolved to: the platform's own DNS answers are not the tenant's to learn.
    assert later[-1] not in delivery.last_error
    assert later[-1] not in dead.details["error"]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/hook",
        "http://127.0.0.1:8000/admin/",
        "http://169.254.169.254/latest/",
        "http://[::1]/h",
        "http://[2002:a9fe:a9fe::]/h",  # 6to4: the metadata address inside
        "http://[::127.0.0.1]/h",  # IPv4-compatible
    ],
)
def test_a_literal_internal_address_is_refused_when_subscribing(url, tenant_api, settings):
    settings.ALERT_PRIVATE_URLS = False
    response = subscribe(tenant_api, url)
    assert response.status_code == 400
    assert response.json()["error"]["details"]["url"] == ["The host resolves to a private address."]


def test_a_receiver_on_an_allowed_network_gets_the_delivery_by_its_name(
    settings, tenant_api, receiver_on_loopback, django_capture_on_commit_callbacks
):
    receiver = receiver_on_loopback()
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_RESOLVER = Dns(ccp_onprem_example=[["127.0.0.1"]])
    response = subscribe(tenant_api, f"http://ccp.onprem.example:{receiver.port}/alerts")
    assert response.status_code == 201, response.content

    delivery = send_test_alert(tenant_api, response.json()["id"], django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.DELIVERED
    [sent] = receiver.requests
    assert sent["verified"]
    assert sent["headers"]["Host"] == f"ccp.onprem.example:{receiver.port}"
    assert sent["path"] == "/alerts"


def test_the_connection_goes_to_the_address_checked_not_to_a_later_answer(
    settings, tenant_api, receiver_on_loopback, django_capture_on_commit_callbacks
):
    """The allowed network stands in for the public internet: the name answers an
    allowed address, then an internal one (as would a rebinding DNS server, and as the
    system's resolver answers for ``localhost``)."""
    checked = receiver_on_loopback(host="127.0.0.2")
    internal = receiver_on_loopback(host="127.0.0.1", port=checked.port)
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.2/32"]
    settings.WEBHOOK_RESOLVER = dns = Dns(localhost=[["127.0.0.2"], ["127.0.0.2"], ["127.0.0.1"]])
    response = subscribe(tenant_api, f"http://localhost:{checked.port}/alerts")
    assert response.status_code == 201, response.content

    delivery = send_test_alert(tenant_api, response.json()["id"], django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.DELIVERED
    assert len(checked.requests) == 1
    assert checked.requests[0]["headers"]["Host"] == f"localhost:{checked.port}"
    assert internal.requests == []
    assert dns.asked == ["localhost"] * 2  # once to subscribe, once for the delivery


def test_a_name_that_stops_resolving_is_retried(
    settings, tenant_api, receiver_on_loopback, django_capture_on_commit_callbacks
):
    settings.WEBHOOK_RESOLVER = Dns(hooks_acme_example=[[PUBLIC]])
    response = subscribe(tenant_api, "http://hooks.acme.example/alerts")
    assert response.status_code == 201, response.content
    settings.WEBHOOK_RESOLVER = Dns()

    delivery = send_test_alert(tenant_api, response.json()["id"], django_capture_on_commit_callbacks)
    assert (delivery.status, delivery.attempts) == (Delivery.Status.PENDING, 1)
    assert delivery.last_error.startswith("hooks.acme.example does not resolve")
