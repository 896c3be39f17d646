"""The operators' Django admin for the fleet: nodes, allocations, flavors, the VRF
pool, tenant storage, webhook deliveries and simulated hardware.

Every action goes through the services with the operator's principal, so it
changes state exactly as the API would and writes the audit event naming the
operator; a staff user without a platform role is refused by the same policy.
No page shows a node's hashes, and a bootstrap token is shown once."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from django.contrib.auth.models import Permission
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from apps.allocations import nodes as node_service
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.core import audit, crypto
from apps.core.models import AuditEvent, SimulatedFault, SimulatedResource
from apps.networking.models import Vlan, Vrf
from apps.storage.models import TenantStorage
from apps.webhooks import services as webhooks
from apps.webhooks.models import Delivery
from tests.factories import UserFactory
from tests.support.fleet import allocated, failed_release, fault, make_nodes

pytestmark = pytest.mark.django_db
SECRET = "ccp-shared-secret-never-shown"

MODELS = [
    "allocations.node",
    "allocations.allocation",
    "catalog.flavor",
    "networking.vrf",
    "storage.tenantstorage",
    "webhooks.delivery",
    "core.simulatedfault",
    "core.simulatedresource",
]


@pytest.fixture(autouse=True)
def _fast_retries(settings):
    settings.PIPELINE_BACKOFF_SECONDS = (0.0, 0.0)
    settings.PIPELINE_POLL_SECONDS = 0.01


@pytest.fixture
def operator(platform_admin):
    client = Client()
    client.force_login(platform_admin)
    return client


def url(model: str, view: str = "changelist", *args) -> str:
    app, name = model.split(".")
    return reverse(f"admin:{app}_{name}_{view}", args=args)


def act(client, model: str, action: str, objects, **data):
    """Post an admin action on ``objects`` and follow the redirect back to the list."""
    return client.post(
        url(model),
        {"action": action, "_selected_action": [str(obj.pk) for obj in objects], **data},
        follow=True,
    )


def text(response) -> str:
    return response.content.decode()


def result_rows(response) -> list[list[str]]:
    """The change list's result table as rows of cell texts (the checkbox column dropped)."""
    table = text(response).split('id="result_list"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    cells = (re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S) for row in rows)
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in row][1:] for row in cells]


def events(action: str, actor) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, actor=actor.username, outcome="success"))


@pytest.fixture
def world(allocator, project, nodes, django_capture_on_commit_callbacks, settings):
    """A fleet with something on every page: an active allocation (with steps and
    simulated hardware), a node with a pending bootstrap token, an enrolled node,
    a dead letter, a fault."""
    settings.CCP_WEBHOOK_SECRET = SECRET
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    pending, enrolled = nodes[2], nodes[3]
    node_service.issue_bootstrap_token(pending)
    node_service.enroll(enrolled.hostname, node_service.issue_bootstrap_token(enrolled), address="10.0.0.4")
    pending.refresh_from_db()
    enrolled.refresh_from_db()
    delivery = Delivery.objects.create(
        event_type=webhooks.STATE_CHANGE,
        url="http://127.0.0.1:9/ccp/webhooks/baremetal/state-change",
        body=json.dumps({"state": "ACTIVE", "allocation_id": str(allocation.pk)}),
        correlation_id="c-1",
        tenant=allocation.tenant,
        status=Delivery.Status.DEAD,
        attempts=6,
        last_status_code=500,
        last_error="receiver answered 500",
    )
    fault("maas", "deploy", target="gpu-nowhere", message="PXE boot failed")
    return {"allocation": allocation, "pending": pending, "enrolled": enrolled, "delivery": delivery}


def secrets_of(world) -> list[str]:
    hashes = [world["pending"].bootstrap_token_hash, world["enrolled"].credential_hash]
    assert all(hashes)
    return [*hashes, SECRET]


# --- Every page renders, and none shows a secret ---------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_changelists_render_without_secrets(model, operator, world):
    response = operator.get(url(model))
    assert response.status_code == 200
    for secret in secrets_of(world):
        assert secret not in text(response)


def test_change_pages_render_without_secrets(operator, world):
    allocation = world["allocation"]
    pages = [
        url("allocations.node", "change", world["pending"].pk),
        url("allocations.node", "change", world["enrolled"].pk),
        url("allocations.node", "change", allocation.node_id),
        url("allocations.node", "add"),
        url("allocations.allocation", "change", allocation.pk),
        url("catalog.flavor", "change", allocation.flavor_id),
        url("catalog.flavor", "add"),
        url("networking.vrf", "change", Vrf.objects.filter(tenant__isnull=False).first().pk),
        url("networking.vrf", "load"),
        url("storage.tenantstorage", "change", TenantStorage.objects.get().pk),
        url("webhooks.delivery", "change", world["delivery"].pk),
        url("core.simulatedfault", "change", SimulatedFault.objects.get().pk),
        url("core.simulatedfault", "add"),
        url("core.simulatedresource", "change", SimulatedResource.objects.first().pk),
    ]
    for page in pages:
        response = operator.get(page)
        assert response.status_code == 200, page
        for secret in secrets_of(world):
            assert secret not in text(response), page


def test_node_page_says_how_far_enrollment_went_and_what_holds_the_node(operator, world):
    body = text(operator.get(url("allocations.node", "change", world["pending"].pk)))
    assert "bootstrap token issued, not used yet" in body
    body = text(operator.get(url("allocations.node", "change", world["enrolled"].pk)))
    assert "enrolled (node credential issued)" in body
    assert "10.0.0.4" in body  # where the proxy may reach the node's apps
    allocation = world["allocation"]
    body = text(operator.get(url("allocations.node", "change", allocation.node_id)))
    assert url("allocations.allocation", "change", allocation.pk) in body
    assert "acme" in body
    assert "cell-1" in body
    history = operator.get(url("allocations.allocation") + f"?node__id__exact={allocation.node_id}")
    assert history.status_code == 200
    assert url("allocations.allocation", "change", allocation.pk) in text(history)
    other_node = operator.get(url("allocations.allocation") + f"?node__id__exact={world['pending'].pk}")
    assert url("allocations.allocation", "change", allocation.pk) not in text(other_node)


def test_node_list_shows_state_and_current_tenant_and_filters(operator, world):
    allocation = world["allocation"]
    body = text(operator.get(url("allocations.node") + "?state__exact=allocated"))
    assert allocation.node.hostname in body
    assert world["pending"].hostname not in body
    assert "fleet-node-allocated" in body
    assert ">acme<" in body
    assert ">cell-1<" in body
    assert "allocations/admin.css" in body
    body = text(operator.get(url("allocations.node") + f"?q={world['pending'].hostname}"))
    assert world["pending"].hostname in body
    assert allocation.node.hostname not in body


def test_allocation_page_shows_steps_read_only(operator, world):
    allocation = world["allocation"]
    body = text(operator.get(url("allocations.allocation", "change", allocation.pk)))
    for step in allocation.steps.all():
        assert step.name in body
    assert 'name="steps-0-status"' not in body  # no editable step field
    assert operator.get(url("allocations.allocation", "add")).status_code == 403
    assert (
        operator.post(
            url("allocations.allocation", "change", allocation.pk), {"state": "RELEASED"}
        ).status_code
        == 403
    )
    assert Allocation.objects.get(pk=allocation.pk).state == Allocation.State.ACTIVE
    assert 'value="delete_selected"' not in text(operator.get(url("allocations.allocation")))


def test_allocations_are_searched_by_id_and_node_hostname(
    operator, world, allocator, project, flavor, django_capture_on_commit_callbacks
):
    allocation = world["allocation"]
    other = allocated(allocator, project, django_capture_on_commit_callbacks)
    for term in (str(allocation.pk)[:8], str(allocation.pk), allocation.node.hostname):
        body = text(operator.get(url("allocations.allocation") + f"?q={term}"))
        assert url("allocations.allocation", "change", allocation.pk) in body, term
        assert url("allocations.allocation", "change", other.pk) not in body, term


def test_flavor_list_counts_nodes_by_state(operator, flavor, small_flavor):
    make_nodes(flavor, 3)
    Node.objects.create(hostname="new-1", flavor=flavor)
    Node.objects.create(hostname="broken-1", flavor=flavor, state=Node.State.FAILED, approved=True)
    make_nodes(small_flavor, 2, prefix="small")
    rows = {cells[0]: cells[1:] for cells in result_rows(operator.get(url("catalog.flavor")))}
    # name, gpu model, gpus, rate | total, available, in use, enrolling, out of service
    assert rows["h100-8x"][-5:] == ["5", "3", "0", "1", "1"]
    assert rows["h100-1x"][-5:] == ["2", "2", "0", "0", "0"]


# --- Nodes -----------------------------------------------------------------------------------


def test_adding_a_node_lands_it_enrolling_and_unapproved(operator, platform_admin, flavor):
    response = operator.post(
        url("allocations.node", "add"),
        {
            "hostname": "gpu-new-001",
            "flavor": flavor.pk,
            "rack": "R12",
            "bmc_address": "10.1.2.3",
            "maas_system_id": "abc123",
            "ib_guid": "0x0000000000000abc",
            "switch_serial": "LEAF9",
            "switch_port": "Eth1/9",
            "bootstrap_token_hours": "24",  # the form's initial value
            # Lifecycle fields are not the form's: posted anyway, they are ignored.
            "state": "available",
            "approved": "on",
            "bootstrap_token_hash": "x" * 64,
        },
    )
    assert response.status_code == 302
    node = Node.objects.get(hostname="gpu-new-001")
    assert node.state == Node.State.ENROLLING
    assert not node.approved
    assert node.bootstrap_token_hash == ""
    assert node.rack == "R12"
    assert node.switch_port == "Eth1/9"
    [event] = events("admin.node.add", platform_admin)
    assert event.target_id == str(node.pk)


def test_approve_makes_an_enrolled_node_available_and_is_audited(operator, platform_admin, flavor, settings):
    settings.AUTO_APPROVE_NODES = False
    node = Node.objects.create(hostname="gpu-enrolling", flavor=flavor)
    node_service.enroll(node.hostname, node_service.issue_bootstrap_token(node), address="10.0.0.9")
    already = make_nodes(flavor, 1)[0]
    response = act(operator, "allocations.node", "approve", [node, already])
    assert response.status_code == 200
    assert "Approved 1: gpu-enrolling." in text(response)
    assert "1 selected node(s) were already approved." in text(response)
    node.refresh_from_db()
    assert node.approved
    assert node.state == Node.State.AVAILABLE
    assert [e.target_id for e in events("node.approve", platform_admin)] == [str(node.pk)]


def test_maintenance_asks_for_a_reason_and_refuses_an_allocated_node(operator, platform_admin, world):
    allocated = world["allocation"].node
    idle = world["pending"]
    page = act(operator, "allocations.node", "put_in_maintenance", [idle, allocated])
    assert page.status_code == 200
    assert 'name="reason"' in text(page)
    assert idle.hostname in text(page)
    assert allocated.hostname in text(page)
    assert Node.objects.get(pk=idle.pk).state == Node.State.AVAILABLE  # nothing happens before the reason

    without_reason = act(operator, "allocations.node", "put_in_maintenance", [idle], apply="yes", reason="")
    assert "This field is required." in text(without_reason)
    assert Node.objects.get(pk=idle.pk).state == Node.State.AVAILABLE

    response = act(
        operator,
        "allocations.node",
        "put_in_maintenance",
        [idle, allocated],
        apply="yes",
        reason="replace PSU",
    )
    body = text(response)
    assert f"Put in maintenance 1: {idle.hostname}." in body
    assert f"Refused for {allocated.hostname}: The node is allocated; release it first." in body
    assert 'class="warning"' in body
    idle.refresh_from_db()
    assert idle.state == Node.State.MAINTENANCE
    assert idle.state_reason == "replace PSU"
    assert Node.objects.get(pk=allocated.pk).state == Node.State.ALLOCATED
    [event] = events("node.maintenance", platform_admin)
    assert event.target_id == str(idle.pk)
    assert event.details == {"reason": "replace PSU"}


def test_return_to_service(operator, platform_admin, nodes):
    broken, fine = nodes[0], nodes[1]
    Node.objects.filter(pk=broken.pk).update(state=Node.State.MAINTENANCE, state_reason="PSU")
    response = act(operator, "allocations.node", "return_to_service", [broken, fine])
    body = text(response)
    assert f"Returned to service 1: {broken.hostname}." in body
    assert f"Refused for {fine.hostname}: A node in state available cannot be returned to service." in body
    broken.refresh_from_db()
    assert broken.state == Node.State.AVAILABLE
    assert broken.state_reason == ""
    assert [e.target_id for e in events("node.return_to_service", platform_admin)] == [str(broken.pk)]


def test_bootstrap_token_is_shown_once_and_enrolls_the_agent(operator, platform_admin, flavor, api, settings):
    settings.AUTO_APPROVE_NODES = False
    node = Node.objects.create(hostname="gpu-fresh", flavor=flavor)
    confirm = act(operator, "allocations.node", "issue_bootstrap_token", [node])
    assert "GPUAAS_BOOTSTRAP_TOKEN" not in text(confirm)
    assert "Issue tokens" in text(confirm)
    assert not Node.objects.get(pk=node.pk).bootstrap_token_hash

    response = operator.post(
        url("allocations.node"),
        {
            "action": "issue_bootstrap_token",
            "_selected_action": [str(node.pk)],
            "apply": "yes",
        },
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    [token] = re.findall(r"GPUAAS_BOOTSTRAP_TOKEN=([A-Za-z0-9_-]+)", text(response))
    assert "GPUAAS_NODE=gpu-fresh" in text(response)
    node.refresh_from_db()
    assert node.bootstrap_token_hash == crypto.hash_secret(token)
    assert token not in node.bootstrap_token_hash
    [event] = events("node.bootstrap_token_issue", platform_admin)
    assert event.target_id == str(node.pk)
    assert token not in json.dumps(event.details)

    # Once: not in a message, a cookie, the session, or any later page.
    assert all(token not in morsel.value for morsel in response.cookies.values())
    assert all(token not in str(s.get_decoded()) for s in Session.objects.all())
    for page in (url("allocations.node"), url("allocations.node", "change", node.pk)):
        later = operator.get(page)
        assert token not in text(later)
        assert node.bootstrap_token_hash not in text(later)

    enrollment = {"hostname": "gpu-fresh", "bootstrap_token": token}
    enrolled = api.post("/api/agent/v1/enroll", enrollment, format="json")
    assert enrolled.status_code == 201
    assert enrolled.json()["node_id"] == str(node.pk)
    assert enrolled.json()["approved"] is False
    again = api.post("/api/agent/v1/enroll", enrollment, format="json")
    assert again.status_code == 401  # spent, and the refusal is audited (as a count per minute)
    audit.summarise_denied(now=time.time() + 120)
    [refused] = AuditEvent.objects.filter(action="node.enroll", outcome=audit.DENIED)
    assert refused.target_id == "gpu-fresh"
    assert token not in json.dumps(refused.details)


# --- Allocations -----------------------------------------------------------------------------


def test_retry_failed_release_step(
    operator, platform_admin, allocator, project, nodes, django_capture_on_commit_callbacks
):
    allocation = failed_release(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.FAILED
    assert allocation.steps.filter(phase="release", status=AllocationStep.Status.FAILED).exists()
    assert Node.objects.get(pk=allocation.node_id).state == Node.State.FAILED
    SimulatedFault.objects.all().delete()  # the switch is back

    with django_capture_on_commit_callbacks(execute=True):
        response = act(operator, "allocations.allocation", "retry_failed_step", [allocation])
    assert response.status_code == 200
    label = f"allocation {str(allocation.pk)[:8]} on {allocation.node.hostname}"
    assert f"Retrying the failed step of 1: {label}." in text(response)
    assert Node.objects.get(pk=allocation.node_id).state == Node.State.AVAILABLE
    assert not allocation.steps.filter(status=AllocationStep.Status.FAILED).exists()
    [event] = events("allocation.retry_step", platform_admin)
    assert event.target_id == str(allocation.pk)
    assert event.details == {"steps": ["network_detach"]}

    nothing = act(operator, "allocations.allocation", "retry_failed_step", [allocation])
    assert f"Refused for {label}: No failed step to retry." in text(nothing)
    assert 'class="warning"' in text(nothing)


def test_fail_allocation_with_a_reason(
    operator, platform_admin, allocator, project, nodes, django_capture_on_commit_callbacks
):
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks, execute=False)  # PENDING
    assert allocation.state == Allocation.State.PENDING
    page = act(operator, "allocations.allocation", "fail_allocation", [allocation])
    assert 'name="reason"' in text(page)
    assert str(allocation.pk)[:8] in text(page)

    with django_capture_on_commit_callbacks(execute=True):
        response = act(
            operator,
            "allocations.allocation",
            "fail_allocation",
            [allocation],
            apply="yes",
            reason="rack power work",
        )
    assert "Failed 1:" in text(response)
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.FAILED
    assert allocation.failure_reason == "failed by operator: rack power work"
    assert Node.objects.get(pk=allocation.node_id).state == Node.State.AVAILABLE
    [event] = events("allocation.fail", platform_admin)
    assert event.target_id == str(allocation.pk)
    assert event.details == {"reason": "rack power work"}


def test_failing_an_active_allocation_is_a_warning(operator, world):
    allocation = world["allocation"]
    response = act(
        operator, "allocations.allocation", "fail_allocation", [allocation], apply="yes", reason="oops"
    )
    assert response.status_code == 200
    label = f"allocation {str(allocation.pk)[:8]} on {allocation.node.hostname}"
    assert f"Refused for {label}: Only a provisioning allocation can be failed, not ACTIVE." in text(response)
    assert Allocation.objects.get(pk=allocation.pk).state == Allocation.State.ACTIVE


def test_release_as_the_operator(operator, platform_admin, world, django_capture_on_commit_callbacks):
    allocation = world["allocation"]
    with django_capture_on_commit_callbacks(execute=True):
        response = act(operator, "allocations.allocation", "release", [allocation])
    assert "Release requested for 1:" in text(response)
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.RELEASED
    assert Node.objects.get(pk=allocation.node_id).state == Node.State.AVAILABLE
    [event] = events("allocation.release", platform_admin)
    assert event.target_id == str(allocation.pk)
    assert event.project_id == allocation.project_id

    again = act(operator, "allocations.allocation", "release", [allocation])
    assert "Already released or releasing:" in text(again)
    assert len(events("allocation.release", platform_admin)) == 1


def test_releasing_a_failed_allocation_is_a_warning_not_an_error_page(
    operator, allocator, project, nodes, django_capture_on_commit_callbacks
):
    fault("ndfc", "attach", message="no route to leaf")
    allocation = allocated(allocator, project, django_capture_on_commit_callbacks)
    assert allocation.state == Allocation.State.FAILED
    response = act(operator, "allocations.allocation", "release", [allocation])
    assert response.status_code == 200
    assert "The allocation failed; there is nothing to release." in text(response)
    assert 'class="warning"' in text(response)


# --- Webhooks --------------------------------------------------------------------------------


def test_replay_a_dead_letter(operator, platform_admin, receiver, tenant, django_capture_on_commit_callbacks):
    body = json.dumps({"event_id": str(uuid.uuid4()), "state": "ACTIVE"}, separators=(",", ":"))
    dead = Delivery.objects.create(
        event_type=webhooks.STATE_CHANGE,
        url=receiver.url + webhooks.STATE_CHANGE_PATH,
        body=body,
        correlation_id="c-dead",
        tenant=tenant,
        status=Delivery.Status.DEAD,
        attempts=6,
        max_attempts=6,
        last_status_code=503,
        last_error="receiver answered 503",
    )
    delivered = Delivery.objects.create(
        event_type=webhooks.STATE_CHANGE,
        url=receiver.url + webhooks.STATE_CHANGE_PATH,
        body=body,
        correlation_id="c-ok",
        status=Delivery.Status.DELIVERED,
        attempts=1,
    )
    dead_letters = text(operator.get(url("webhooks.delivery") + "?status=dead"))
    assert str(dead.event_id) in dead_letters
    assert str(delivered.event_id) not in dead_letters
    assert "Dead letters" in dead_letters

    with django_capture_on_commit_callbacks(execute=True):
        response = act(operator, "webhooks.delivery", "replay", [dead, delivered])
    assert f"Replayed 1: {webhooks.STATE_CHANGE} {dead.event_id}." in text(response)
    assert "1 selected delivery(ies) are not dead letters" in text(response)
    dead.refresh_from_db()
    assert dead.status == Delivery.Status.DELIVERED
    assert dead.attempts == 1
    [request] = receiver.requests
    assert request["body"] == body.encode()
    assert request["verified"]  # signed with its timestamp (X-GPUaaS-Timestamp)
    [event] = events("webhook.replay", platform_admin)
    assert event.target_id == str(dead.pk)
    assert event.tenant_id == tenant.pk

    page = text(operator.get(url("webhooks.delivery", "change", dead.pk)))
    assert "&quot;state&quot;: &quot;ACTIVE&quot;" in page
    assert SECRET not in page


# --- VRF pool --------------------------------------------------------------------------------


def test_load_vrfs_into_the_pool(operator, platform_admin, ready_tenant):
    assert Vrf.objects.count() == 4  # vrf-0001..0004, VNIs 50001.., VLANs 1000..1015
    listing = text(operator.get(url("networking.vrf")))
    assert "3 free VRFs in the pool." in listing
    assert url("networking.vrf", "load") in listing
    assert "vrf-0001" in text(operator.get(url("networking.vrf") + "?assigned=assigned"))
    assert "vrf-0001" not in text(operator.get(url("networking.vrf") + "?assigned=free"))

    form = text(operator.get(url("networking.vrf", "load")))
    # The suggestion extends the last range by eight (existing names are skipped).
    for suggested in ('value="vrf"', 'value="12"', 'value="50001"', 'value="1000"'):
        assert suggested in form

    range_ = {"prefix": "vrf", "count": 12, "first_vni": 50001, "first_vlan": 1000}
    response = operator.post(url("networking.vrf", "load"), range_, follow=True)
    assert "Loaded 8 VRF(s) into the pool; 11 free." in text(response)
    vrf = Vrf.objects.get(name="vrf-0012")
    assert vrf.vni == 50012
    assert vrf.tenant is None
    assert sorted(vrf.vlans.values_list("vlan_id", flat=True)) == [1044, 1045, 1046, 1047]
    [event] = events("network.pool_load", platform_admin)
    assert event.details == {"prefix": "vrf", "created": 8}


def test_loading_a_range_that_collides_is_refused_on_the_form(operator, ready_tenant):
    before = (Vrf.objects.count(), Vlan.objects.count())
    response = operator.post(
        url("networking.vrf", "load"), {"prefix": "other", "count": 2, "first_vni": 50004, "first_vlan": 2000}
    )
    assert response.status_code == 200
    assert "VNI(s) already in use: 50004." in text(response)
    response = operator.post(
        url("networking.vrf", "load"), {"prefix": "other", "count": 2, "first_vni": 60000, "first_vlan": 1014}
    )
    assert "VLAN(s) already in use: 1014, 1015." in text(response)
    response = operator.post(
        url("networking.vrf", "load"), {"prefix": "vrf", "count": 4, "first_vni": 50001, "first_vlan": 1000}
    )
    assert "already in the pool: nothing to add" in text(response)
    response = operator.post(
        url("networking.vrf", "load"), {"prefix": "big", "count": 800, "first_vni": 70000, "first_vlan": 2000}
    )
    assert "the last would be above 4094" in text(response)
    assert (Vrf.objects.count(), Vlan.objects.count()) == before
    assert not AuditEvent.objects.filter(action="network.pool_load", actor_type="user").exists()


# --- Simulated hardware ----------------------------------------------------------------------


def test_operators_inject_and_remove_faults(operator, platform_admin):
    response = operator.post(
        url("core.simulatedfault", "add"),
        {
            "system": "maas",
            "operation": "deploy",
            "target": "",
            "mode": "fail",
            "remaining": "",
            "probability": "1.0",
            "message": "PXE boot failed",
        },
    )
    assert response.status_code == 302
    injected = SimulatedFault.objects.get()
    assert (injected.system, injected.operation, injected.remaining) == ("maas", "deploy", None)
    assert events("admin.simulatedfault.add", platform_admin)
    bad = operator.post(
        url("core.simulatedfault", "add"),
        {
            "system": "maas",
            "operation": "deploy",
            "mode": "fail",
            "probability": "1.5",
        },
    )
    assert "A probability is between 0 and 1." in text(bad)
    response = operator.post(url("core.simulatedfault", "delete", injected.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not SimulatedFault.objects.exists()
    assert events("admin.simulatedfault.delete", platform_admin)


def test_simulated_resources_are_read_only(operator, world):
    resource = SimulatedResource.objects.first()
    assert operator.get(url("core.simulatedresource", "add")).status_code == 403
    change = url("core.simulatedresource", "change", resource.pk)
    assert operator.post(change, {"state": "{}"}).status_code == 403


# --- Staff without a platform role -----------------------------------------------------------


@pytest.fixture
def staff():
    """Staff with every Django permission of these models, but no platform role."""
    user = UserFactory(is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label__in=["allocations", "webhooks", "networking"],
        )
    )
    client = Client()
    client.force_login(user)
    return user, client


def test_staff_without_a_platform_role_is_refused_and_the_refusals_audited(
    staff, world, flavor, settings, django_capture_on_commit_callbacks
):
    user, client = staff
    settings.AUTO_APPROVE_NODES = False
    enrolling = Node.objects.create(hostname="gpu-enrolling", flavor=flavor)
    idle, allocation, dead = world["pending"], world["allocation"], world["delivery"]

    refusals = [
        act(client, "allocations.node", "approve", [enrolling]),
        act(client, "allocations.node", "put_in_maintenance", [idle], apply="yes", reason="x"),
        act(client, "allocations.node", "issue_bootstrap_token", [enrolling], apply="yes"),
        act(client, "allocations.allocation", "release", [allocation]),
        act(client, "allocations.allocation", "retry_failed_step", [allocation]),
        act(client, "webhooks.delivery", "replay", [dead]),
        client.post(
            url("networking.vrf", "load"),
            {"prefix": "x", "count": 1, "first_vni": 90000, "first_vlan": 3000},
            follow=True,
        ),
    ]
    for response in refusals:
        assert response.status_code == 200
        assert "You do not have permission to perform this action." in text(response)
        assert 'class="error"' in text(response)
        assert "GPUAAS_BOOTSTRAP_TOKEN" not in text(response)

    enrolling.refresh_from_db()
    assert not enrolling.approved
    assert not enrolling.bootstrap_token_hash
    assert Node.objects.get(pk=idle.pk).state == Node.State.AVAILABLE
    assert Allocation.objects.get(pk=allocation.pk).state == Allocation.State.ACTIVE
    assert Delivery.objects.get(pk=dead.pk).status == Delivery.Status.DEAD
    assert not Vrf.objects.filter(name__startswith="x-").exists()
    denied = AuditEvent.objects.filter(actor=user.username, outcome="denied")
    assert set(denied.values_list("action", flat=True)) == {
        "node.manage",
        "allocation.manage",
        "network.manage",
    }
    assert denied.count() == len(refusals)
    assert not AuditEvent.objects.filter(actor=user.username, outcome="success").exists()
