"""An operator suspends a tenant (decision 0078): its users keep every read and can
give back what they hold, but take, add and open nothing new (409 ``invalid_state``,
one message from one check), and what it holds stays allocated and metered. Suspending and
reactivating are audited, idempotent operator actions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.access.models import AccessCredential, AuthorizedKey
from apps.allocations.models import Allocation
from apps.core.errors import Forbidden, InvalidState, ValidationFailed
from apps.core.models import AuditEvent
from apps.monitoring.models import AlertSubscription
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant
from apps.webhooks.models import Delivery
from tests.factories import AppInstanceFactory, FlavorFactory, TenantFactory
from tests.support.catalog import publish
from tests.support.pages import client_for
from tests.support.snapshots import made_once_fixtures
from tests.support.world import (
    ALERT_RECEIVER,
    MATRIX_KEYS,
    build_world,
    sign_in,
    with_alert_subscription,
    with_allocation,
)

pytestmark = pytest.mark.django_db

REASON = "invoice 2025-10 unpaid"


def _world():
    """The matrices' world (tests/support/world.py) with apps on tenant A's allocation:
    one running, one stopped."""
    world = with_alert_subscription(with_allocation(build_world()))
    FlavorFactory(name="h100-8x")
    version = publish("jupyterlab").versions.get()
    world.running = AppInstanceFactory(allocation=world.allocation, app_version=version, state="running")
    world.stopped = AppInstanceFactory(allocation=world.allocation, app_version=version, state="stopped")
    return world


# the receivers below listen on loopback
globals().update(made_once_fixtures(_world, ALERT_PRIVATE_URLS=True))


def operator(world):
    return principals.for_user(world.users["platform_admin"])


def suspend(world) -> Tenant:
    return services.suspend_tenant(operator(world), world.tenant, REASON)


A1 = "/api/v1/projects/{w.project.pk}"
INSTANCES = A1 + "/app-instances"
ALLOCATION = A1 + "/allocations/{w.allocation.pk}"

# What a suspended tenant may no longer do: (method, path template, body).
REFUSED = {
    "allocate": (
        "post",
        "/api/baremetal-manager/allocate",
        lambda w: {
            "flavor": "h100-8x",
            "os_image": "ubuntu-22.04",
            "project_id": "cell-1",
            "tenant_id": "acme",
        },
    ),
    "launch": (
        "post",
        INSTANCES,
        lambda w: {"app": "jupyterlab", "allocation_id": str(w.allocation.pk)},
    ),
    "start": ("post", INSTANCES + "/{w.stopped.pk}/start", lambda w: {}),
    "ui_session": ("post", "/api/v1/workloads/{w.running.pk}/ui/session", lambda w: {"endpoint": "lab"}),
    "key_add": ("post", ALLOCATION + "/authorized-keys", lambda w: {"public_key": MATRIX_KEYS[1]}),
    "credential_create": ("post", A1 + "/access-credentials", lambda w: {"name": "new-key"}),
    "project_create": (
        "post",
        "/api/v1/projects",
        lambda w: {"tenant": str(w.tenant.pk), "project_id": "cell-9", "name": "Cell 9"},
    ),
    "ccp_project_create": (
        "post",
        "/api/tenants/{w.tenant.tenant_id}/projects",
        lambda w: {"project_id": "cell-9", "name": "Cell 9"},
    ),
    "member_add": ("post", A1 + "/members", lambda w: {"username": w.candidate.username, "role": "viewer"}),
    "service_account_create": ("post", A1 + "/service-accounts", lambda w: {"name": "ci", "role": "viewer"}),
    "alert_subscribe": (
        "post",
        "/api/alerts/subscribe",
        lambda w: {"tenant_id": "acme", "url": ALERT_RECEIVER, "secret": "another-receiver-secret"},
    ),
    "alert_test_send": ("post", "/api/alerts/subscriptions/{w.target_subscription.pk}/test", lambda w: {}),
}


def _held(world) -> dict:
    """What a refused request must leave as it was."""
    return {
        "allocations": list(Allocation.objects.order_by("pk").values_list("pk", "state")),
        "instances": list(AppInstance.objects.order_by("pk").values_list("pk", "state")),
        "projects": Project.objects.count(),
        "memberships": Membership.objects.count(),
        "service_accounts": ServiceAccount.objects.count(),
        "credentials": AccessCredential.objects.count(),
        "keys": AuthorizedKey.objects.count(),
        "subscriptions": AlertSubscription.objects.count(),
        "deliveries": Delivery.objects.count(),
    }


@pytest.mark.parametrize("endpoint", list(REFUSED))
def test_a_suspended_tenant_takes_adds_and_opens_nothing_new(api, world, endpoint):
    suspend(world)
    sign_in(api, world, "tenant_admin")
    method, template, body = REFUSED[endpoint]
    before = _held(world)

    response = getattr(api, method)(template.format(w=world), body(world), format="json")

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_state"
    # One check, one message, wherever the write comes from.
    assert error["message"] == services.refusal_reason(Tenant.objects.get(pk=world.tenant.pk))
    assert error["message"].startswith("The tenant is suspended.")
    assert _held(world) == before


# What a suspended tenant still does: reads, and giving back (method, path, body, status).
ALLOWED = {
    "tenant_get": ("get", "/api/tenants/{w.tenant.tenant_id}", None, 200),
    "usage_get": ("get", "/api/metering/usage?tenant_id=acme&from=2026-10-01&to=2026-11-01", None, 200),
    "export_csv": ("get", "/api/metering/export/csv?tenant_id=acme&period=2025-10", None, 200),
    "quota_get": ("get", "/api/metering/quota/acme", None, 200),
    "allocation_list": ("get", A1 + "/allocations", None, 200),
    "instance_get": ("get", INSTANCES + "/{w.running.pk}", None, 200),
    "key_list": ("get", ALLOCATION + "/authorized-keys", None, 200),
    "audit_list": ("get", "/api/v1/audit", None, 200),
    "release": ("post", "/api/baremetal-manager/{w.allocation.node_id}/release", {"drain": True}, 202),
    "stop": ("post", INSTANCES + "/{w.running.pk}/stop", {}, 202),
    "delete": ("delete", INSTANCES + "/{w.stopped.pk}", None, 202),
    "key_remove": ("delete", ALLOCATION + "/authorized-keys/{w.target_key.pk}", None, 204),
    "credential_delete": ("delete", A1 + "/access-credentials/{w.target_credential.pk}", None, 204),
    "service_account_revoke": ("delete", A1 + "/service-accounts/{w.target_service_account.pk}", None, 204),
    "member_remove": ("delete", A1 + "/members/{w.target_membership.pk}", None, 204),
    "alert_unsubscribe": ("delete", "/api/alerts/subscriptions/{w.target_subscription.pk}", None, 204),
}


@pytest.mark.parametrize("endpoint", list(ALLOWED))
def test_a_suspended_tenant_still_reads_and_gives_back(api, world, endpoint):
    suspend(world)
    sign_in(api, world, "tenant_admin")
    method, template, body, expected = ALLOWED[endpoint]
    kwargs = {"format": "json"} if body is not None else {}
    response = getattr(api, method)(template.format(w=world), body, **kwargs)
    assert response.status_code == expected, response.content


def test_the_tenant_says_it_is_suspended_and_why(api, world):
    suspend(world)
    sign_in(api, world, "tenant_admin")
    body = api.get(f"/api/tenants/{world.tenant.tenant_id}").json()
    assert (body["status"], body["status_reason"]) == ("suspended", REASON)


def test_what_the_tenant_holds_stays_allocated_and_metered(api, world):
    suspend(world)
    world.allocation.refresh_from_db()
    world.running.refresh_from_db()
    assert world.allocation.state == Allocation.State.ACTIVE
    assert world.running.state == AppInstance.State.RUNNING
    sign_in(api, world, "tenant_admin")
    held = api.get("/api/metering/quota/acme").json()["resources"]
    assert (held["nodes"]["used"], held["gpus"]["used"]) == (1, world.allocation.gpus)
    assert held["app_instances"]["used"] == 2


def test_suspending_and_reactivating_are_audited_once_with_the_reason(world):
    admin = world.users["platform_admin"]
    suspended = suspend(world)
    assert (suspended.status, suspended.status_reason) == (Tenant.Status.SUSPENDED, REASON)
    again = services.suspend_tenant(operator(world), world.tenant, "another reason")
    assert again.status_reason == REASON  # suspending twice changes nothing

    reactivated = services.reactivate_tenant(operator(world), world.tenant)
    assert (reactivated.status, reactivated.status_reason) == (Tenant.Status.ACTIVE, "")
    services.reactivate_tenant(operator(world), world.tenant)

    events = AuditEvent.objects.filter(action__in=["tenant.suspend", "tenant.reactivate"]).order_by("id")
    assert [(e.action, e.actor, e.target_id, e.tenant_id) for e in events] == [
        ("tenant.suspend", admin.username, str(world.tenant.pk), world.tenant.pk),
        ("tenant.reactivate", admin.username, str(world.tenant.pk), world.tenant.pk),
    ]
    assert events[0].details == {"reason": REASON}
    assert events[1].details == {"suspended_for": REASON}


def test_only_operators_suspend_and_only_with_a_reason(world):
    tenant_admin = principals.for_user(world.users["tenant_admin"])
    with pytest.raises(Forbidden):
        services.suspend_tenant(tenant_admin, world.tenant, REASON)
    with pytest.raises(Forbidden):
        services.reactivate_tenant(tenant_admin, world.tenant)
    assert AuditEvent.objects.filter(action="tenant.suspend", outcome="denied").exists()
    with pytest.raises(ValidationFailed) as refused:
        services.suspend_tenant(operator(world), world.tenant, "  ")
    assert "reason" in refused.value.details
    assert Tenant.objects.get(pk=world.tenant.pk).status == Tenant.Status.ACTIVE


@pytest.mark.parametrize("status", [Tenant.Status.ONBOARDING, Tenant.Status.FAILED])
def test_a_tenant_that_never_became_active_is_neither_suspended_nor_reactivated(world, status):
    tenant = TenantFactory(status=status)
    with pytest.raises(InvalidState):
        services.suspend_tenant(operator(world), tenant, REASON)
    with pytest.raises(InvalidState):
        services.reactivate_tenant(operator(world), tenant)
    assert Tenant.objects.get(pk=tenant.pk).status == status


# --- the admin ----------------------------------------------------------------------------


def _act(client, action: str, tenants, **data):
    return client.post(
        reverse("admin:tenancy_tenant_changelist"),
        {"action": action, "_selected_action": [str(t.pk) for t in tenants], **data},
        follow=True,
    )


def test_operators_suspend_with_a_reason_and_reactivate_in_the_admin(world):
    client = client_for(world.users["platform_admin"])
    tenant, other = world.tenant, world.other_tenant

    asked = _act(client, "suspend", [tenant])
    assert 'name="reason"' in asked.content.decode()
    assert Tenant.objects.get(pk=tenant.pk).status == Tenant.Status.ACTIVE  # nothing before the reason
    without_reason = _act(client, "suspend", [tenant], apply="yes", reason="")
    assert "This field is required." in without_reason.content.decode()

    done = _act(client, "suspend", [tenant], apply="yes", reason=REASON).content.decode()
    assert f"Suspended 1: {tenant.name}." in done
    assert (Tenant.objects.get(pk=tenant.pk).status, Tenant.objects.get(pk=tenant.pk).status_reason) == (
        Tenant.Status.SUSPENDED,
        REASON,
    )
    again = _act(client, "suspend", [tenant, other], apply="yes", reason="again").content.decode()
    assert f"Already suspended: {tenant.name}." in again
    assert f"Suspended 1: {other.name}." in again

    back = _act(client, "reactivate", [tenant]).content.decode()
    assert f"Reactivated 1: {tenant.name}." in back
    assert Tenant.objects.get(pk=tenant.pk).status == Tenant.Status.ACTIVE
    assert AuditEvent.objects.filter(action="tenant.suspend").count() == 2
    assert AuditEvent.objects.filter(action="tenant.reactivate").count() == 1


def test_the_tenant_form_shows_the_status_without_letting_it_be_edited(world):
    client = client_for(world.users["platform_admin"])
    page = client.get(reverse("admin:tenancy_tenant_change", args=[world.tenant.pk])).content.decode()
    assert "Lifecycle" in page
    assert 'name="status"' not in page
    assert 'name="status_reason"' not in page
