"""The alerts API (CONTRACT "Monitoring and alerts") for each kind of caller: CCP's
platform integration subscribes platform-wide or for any tenant and lists every
alert; a tenant's people subscribe and see only their own tenant (a project member
only its project's alerts); out of scope is 404, too little role 403."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.monitoring.alerts import services
from apps.monitoring.models import AlertSubscription
from apps.webhooks.models import Delivery
from tests.monitoring.alerting import Rounds, held_fleet
from tests.support.members import member

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]
INTEGRATION = {"roles": ["GPUaaS Platform Integration"]}
SECRET = "a-long-enough-secret-0123"


@pytest.fixture
def alerts(project, other_tenant_project, flavor, django_capture_on_commit_callbacks):
    """One firing alert on an acme node (project cell-1), one on globex's."""
    fleet = held_fleet(project, other_tenant_project, flavor)
    for node in (fleet[0], fleet[2]):
        services.record_measurement("cpu_utilization", str(node.pk), 80.0, node=node, label=node.hostname)
    Rounds(django_capture_on_commit_callbacks).at(0)
    return fleet


@pytest.fixture
def ccp(api, ccp_issuer):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token(INTEGRATION)}")
    return api


def as_user(api, user):
    api.force_login(user)
    return api


def subscribe(api, **body):
    return api.post(
        "/api/alerts/subscribe", {"url": "http://127.0.0.1:9/hook", "secret": SECRET, **body}, format="json"
    )


@pytest.fixture(autouse=True)
def _private_urls(settings):
    settings.ALERT_PRIVATE_URLS = True


def test_ccp_subscribes_platform_wide_and_for_a_tenant(ccp, tenant):
    response = subscribe(ccp)
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"id", "tenant_id", "url", "severities"}
    assert (body["tenant_id"], body["severities"]) == (None, ["warning", "critical"])
    response = subscribe(ccp, tenant_id="acme", severities=["critical"])
    assert (response.status_code, response.json()["tenant_id"], response.json()["severities"]) == (
        201,
        "acme",
        ["critical"],
    )
    listed = ccp.get("/api/alerts/subscriptions").json()["results"]
    assert sorted(str(s["tenant_id"]) for s in listed) == ["None", "acme"]
    assert "secret" not in listed[0]
    assert AuditEvent.objects.filter(action="alert_subscription.create").count() == 2


def test_a_tenant_admin_subscribes_only_its_own_tenant(api, tenant, tenant_admin, other_tenant_project):
    as_user(api, tenant_admin)
    response = subscribe(api)
    assert (response.status_code, response.json()["tenant_id"]) == (201, "acme")
    assert subscribe(api, tenant_id="acme").status_code == 201
    assert subscribe(api, tenant_id="globex").status_code == 404
    assert subscribe(api, tenant_id="nobody").status_code == 404
    assert AlertSubscription.objects.filter(tenant__tenant_id="globex").count() == 0


def test_a_tenant_sees_and_deletes_only_its_own_subscriptions(
    api, ccp_issuer, tenant, tenant_admin, other_tenant_project
):
    theirs = member("tenant_admin", tenant=other_tenant_project.tenant)
    as_user(api, theirs)
    foreign = subscribe(api).json()["id"]
    as_user(api, tenant_admin)
    mine = subscribe(api).json()["id"]
    assert [s["id"] for s in api.get("/api/alerts/subscriptions").json()["results"]] == [mine]
    assert api.delete(f"/api/alerts/subscriptions/{foreign}").status_code == 404
    assert api.post(f"/api/alerts/subscriptions/{foreign}/test").status_code == 404
    assert api.post(f"/api/alerts/subscriptions/{mine}/test").status_code == 202
    assert api.delete(f"/api/alerts/subscriptions/{mine}").status_code == 204
    assert api.delete(f"/api/alerts/subscriptions/{mine}").status_code == 404
    assert AlertSubscription.objects.filter(pk=foreign).exists()


def test_a_test_send_waits_for_the_receivers_pending_delivery(api, tenant, tenant_admin):
    """Each test is a delivery a worker sends, up to six times: test sends as fast as the
    API takes them (1,200 a minute) let one tenant's slow receiver occupy every worker."""
    as_user(api, tenant_admin)
    mine = subscribe(api).json()["id"]
    assert api.post(f"/api/alerts/subscriptions/{mine}/test").status_code == 202
    refused = api.post(f"/api/alerts/subscriptions/{mine}/test")
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["code"] == "conflict"
    assert Delivery.objects.filter(signer=mine).count() == 1
    Delivery.objects.filter(signer=mine).update(status=Delivery.Status.DELIVERED)
    assert api.post(f"/api/alerts/subscriptions/{mine}/test").status_code == 202


def test_a_viewer_may_not_subscribe(api, viewer):
    as_user(api, viewer)
    assert subscribe(api, tenant_id="acme").status_code == 403
    assert api.get("/api/alerts/subscriptions").status_code == 403


def test_bad_subscriptions_answer_the_error_envelope(api, tenant_admin, settings):
    as_user(api, tenant_admin)
    for body in (
        {"url": "not a url"},
        {"url": "ftp://example.com/x"},
        {"secret": "short"},
        {"severities": ["info"]},
        {"severities": []},
    ):
        response = subscribe(api, **body)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "validation_error"
    settings.ALERT_PRIVATE_URLS = False
    response = subscribe(api, url="http://10.0.0.5/hook")
    assert response.status_code == 400
    assert "private" in str(response.json())


def test_a_tenant_has_a_bounded_number_of_subscriptions(api, tenant_admin):
    as_user(api, tenant_admin)
    for _ in range(20):
        assert subscribe(api).status_code == 201
    refused = subscribe(api)
    assert refused.status_code == 409
    assert refused.json()["error"]["details"] == {
        "resource": "alert_subscriptions",
        "limit": 20,
        "used": 20,
        "requested": 1,
    }


def test_the_alert_list_is_scoped_to_the_caller(api, ccp, alerts, tenant, tenant_admin, other_project):
    everything = ccp.get("/api/alerts").json()
    assert sorted(a["tenant_id"] for a in everything["results"]) == ["acme", "globex"]
    assert [a["tenant_id"] for a in ccp.get("/api/alerts", {"tenant_id": "globex"}).json()["results"]] == [
        "globex"
    ]
    [one] = ccp.get("/api/alerts", {"tenant_id": "acme", "state": "firing"}).json()["results"]
    assert (one["rule"], one["state"], one["project_id"]) == ("cpu_utilization_warning", "firing", "cell-1")
    assert ccp.get("/api/alerts", {"state": "resolved"}).json()["results"] == []
    assert ccp.get("/api/alerts", {"state": "pending"}).status_code == 400

    api.credentials()
    as_user(api, tenant_admin)
    assert [a["tenant_id"] for a in api.get("/api/alerts").json()["results"]] == ["acme"]
    assert api.get("/api/alerts", {"tenant_id": "globex"}).status_code == 404
    elsewhere = member("viewer", project=other_project)
    as_user(api, elsewhere)
    assert api.get("/api/alerts").json()["results"] == []  # the alert is cell-1's
