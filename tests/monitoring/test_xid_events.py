"""XID errors are events: one open event per GPU and code however often the driver
repeats it (a retried report counts once), classified by NVIDIA's catalogue, and
resolved only by an operator (audited); the next occurrence opens a new one."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from apps.core.models import AuditEvent
from apps.monitoring.models import XidEvent
from apps.monitoring.services import MAX_OPEN_XIDS_PER_NODE
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def report_xids(agent, *xids) -> None:
    response = agent({"xids": list(xids)})
    assert response.status_code == 200, response.content


def operator_resolves(user, events, note="GPU reset"):
    client = Client()
    client.force_login(user)
    return client.post(
        reverse("admin:monitoring_xidevent_changelist"),
        {"action": "resolve", "apply": "1", "reason": note, "_selected_action": [str(e.pk) for e in events]},
        follow=True,
    )


def test_repeats_are_one_event_and_retries_count_once(agent):
    now = time.time()
    report_xids(agent, {"gpu": 1, "code": 79, "at": now - 20}, {"gpu": 1, "code": 13, "at": now - 20})
    report_xids(agent, {"gpu": 1, "code": 79, "at": now - 10})
    report_xids(agent, {"gpu": 1, "code": 79, "at": now - 10})  # the same report again, retried
    fallen = XidEvent.objects.get(node=agent.node, code=79)
    assert (fallen.occurrences, fallen.severity) == (2, "critical")
    assert "fallen off the bus" in fallen.description
    assert XidEvent.objects.get(node=agent.node, code=13).severity == "warning"
    report_xids(agent, {"gpu": 1, "code": 4242, "at": now})
    assert XidEvent.objects.get(code=4242).severity == "warning"  # not in the catalogue


def test_an_operator_resolves_an_event_and_the_next_occurrence_opens_another(agent, platform_admin):
    now = time.time()
    report_xids(agent, {"gpu": 0, "code": 48, "at": now - 60})
    event = XidEvent.objects.get(node=agent.node)
    response = operator_resolves(platform_admin, [event], note="GPU reset, ECC clean")
    assert "Resolved 1" in response.content.decode()
    event.refresh_from_db()
    assert (event.is_open, event.resolved_by, event.resolution_note) == (
        False,
        platform_admin.username,
        "GPU reset, ECC clean",
    )
    assert AuditEvent.objects.filter(
        action="xid_event.resolve", actor=platform_admin.username, target_id=str(event.pk), outcome="success"
    ).exists()
    report_xids(agent, {"gpu": 0, "code": 48, "at": now})
    assert XidEvent.objects.filter(node=agent.node, code=48).count() == 2
    assert XidEvent.objects.filter(node=agent.node, code=48, resolved_at__isnull=True).count() == 1


def test_staff_without_a_platform_role_cannot_resolve(agent):
    report_xids(agent, {"gpu": 0, "code": 95, "at": time.time()})
    event = XidEvent.objects.get(node=agent.node)
    staff = UserFactory(is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_xidevent", "change_xidevent"]))
    operator_resolves(staff, [event])
    event.refresh_from_db()
    assert event.is_open
    assert AuditEvent.objects.filter(action="node.manage", outcome="denied").exists()


def test_a_node_holds_a_bounded_number_of_open_events(agent):
    # A bare-metal tenant has root on its node: its agent can report any codes, 64 at a
    # time, each an open event, an alert and a webhook to CCP.
    now = time.time()
    for batch in range(4):
        report_xids(agent, *({"gpu": n % 8, "code": 1000 + 64 * batch + n, "at": now} for n in range(64)))
    open_events = XidEvent.objects.filter(node=agent.node, resolved_at__isnull=True)
    assert open_events.count() == MAX_OPEN_XIDS_PER_NODE
    first = open_events.get(gpu=0, code=1000)
    report_xids(agent, {"gpu": 0, "code": 1000, "at": now + 1})  # one of them, again: still counted
    first.refresh_from_db()
    assert first.occurrences == 2
