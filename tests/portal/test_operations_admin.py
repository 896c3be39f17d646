"""The operators' admin as they read it: "GPUaaS operations" on every page, objects
named as people say them, model names spelled right, the simulated world's models
only while a simulated driver runs, and each front-page count shown only to an
operator who may view what it counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from apps.access.models import TerminalSession
from apps.allocations.models import Allocation
from apps.core.admin import register_simulation
from apps.core.models import SimulatedFault, SimulatedResource
from apps.monitoring.models import Alert, AlertRule, XidEvent
from apps.runtime.models import AppInstance, Operation
from apps.webhooks.models import Delivery
from tests.factories import AllocationFactory, NodeFactory, ProjectFactory, UserFactory
from tests.support.pages import client_for


@pytest.fixture
def operator(platform_admin):
    return client_for(platform_admin)


@pytest.fixture
def released(db):
    return AllocationFactory(
        node=NodeFactory(hostname="gpu1-001.demo"),
        project=ProjectFactory(name="Demo project"),
        state=Allocation.State.RELEASED,
    )


def test_an_allocation_reads_as_its_node_project_and_state(operator, released):
    page = operator.get(reverse("admin:allocations_allocation_change", args=[released.pk])).content.decode()
    assert "gpu1-001.demo · Demo project · RELEASED" in page
    assert str(released.pk) not in page.split("<h2>", 1)[0]  # the title and breadcrumbs name no UUID


def test_fleet_records_read_as_operators_say_them(released):
    node, now = released.node, timezone.now()
    delivery = Delivery(event_type="allocation.state_changed", url="https://ccp.example/hooks", status="dead")
    rule = AlertRule(name="gpu_temperature_critical")
    alert = Alert(rule=rule, subject=f"node:{node.pk}:gpu:3", hostname=node.hostname, gpu=3, state="firing")
    xid = XidEvent(node=node, gpu=3, code=79, first_seen_at=now, last_seen_at=now)
    instance = AppInstance(name="notebook", project=released.project, state="running")
    launch = Operation(kind="launch", instance=instance, state="succeeded")
    terminal = TerminalSession(username="alice", node=node, state="open")
    assert str(node) == "gpu1-001.demo"
    assert str(delivery) == "allocation.state_changed to ccp.example · dead"
    assert str(alert) == "gpu_temperature_critical · gpu1-001.demo GPU 3 · firing"
    assert str(xid) == "XID 79 on gpu1-001.demo GPU 3"
    assert str(instance) == "notebook · Demo project · running"
    assert str(launch) == "launch notebook · succeeded"
    assert str(terminal) == "terminal of alice on gpu1-001.demo · open"


def test_the_index_is_the_operations_page_with_model_names_spelled_right(operator):
    page = operator.get(reverse("admin:index")).content.decode()
    assert "<title>Operations | GPUaaS operations</title>" in page
    assert ">GPUaaS operations</a>" in page
    for name in ("External identities", "XID events", "Node SSH hosts", "User SSH keys"):
        assert f">{name}</a>" in page
    assert "identitys" not in page.lower()


@pytest.mark.parametrize(
    ("drivers", "shown"),
    [
        ({"*": "simulated"}, True),
        ({"*": "real", "ufm": "simulated"}, True),
        ({"*": "real"}, False),
    ],
)
def test_simulated_models_are_there_only_beside_a_simulated_driver(settings, drivers, shown):
    settings.DRIVERS = drivers
    site = admin.AdminSite(name="drivers")
    register_simulation(site)
    assert site.is_registered(SimulatedFault) is shown
    assert site.is_registered(SimulatedResource) is shown


def test_the_demos_operator_injects_faults_from_the_index(operator):
    assert ">Simulated faults</a>" in operator.get(reverse("admin:index")).content.decode()


def test_each_count_is_shown_only_to_who_may_view_what_it_counts(db):
    clerk = UserFactory(is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_delivery"))
    Delivery.objects.create(
        event_type="allocation.state_changed", url="https://ccp.example/hooks", body="{}", correlation_id="c"
    )
    page = client_for(clerk).get(reverse("admin:index")).content.decode()
    assert "Dead letters" in page
    for hidden in ("Failed allocations", "Offline agents", "Firing alerts", "Nodes by flavor and state"):
        assert hidden not in page


def test_stuck_allocations_are_a_filter_of_the_allocation_list(operator, released):
    stuck = AllocationFactory(
        node=NodeFactory(hostname="gpu1-002.demo"),
        state=Allocation.State.PROVISIONING,
        lease_until=timezone.now() - timedelta(minutes=5),
    )
    AllocationFactory(node=NodeFactory(hostname="gpu1-003.demo"), state=Allocation.State.PROVISIONING)
    page = operator.get(reverse("admin:allocations_allocation_changelist") + "?stuck=yes").content.decode()
    assert "gpu1-002.demo" in page
    assert str(stuck.pk)[:8] in page
    assert "gpu1-003.demo" not in page
    assert "gpu1-001.demo" not in page
