"""The operators' actions on app instances in the Django admin: offered only to
operators who may change instances (not to view-only staff, even by a forged POST),
and an instance already in the target state is named as such, not counted as done."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from apps.core.models import AuditEvent
from apps.runtime import agents, services
from apps.runtime.models import AgentTask
from apps.tenancy.principal import for_user
from tests.factories import UserFactory
from tests.support.proxy import start_instance
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())

CHANGELIST = reverse("admin:runtime_appinstance_changelist")
OPERATOR_ACTIONS = {
    "force_stop",
    "decommission",
    "ui_embedded",
    "ui_link_out",
    "ui_native",
    "ui_platform_decides",
}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _run(client, action: str, *instances):
    return client.post(
        CHANGELIST,
        {"action": action, ACTION_CHECKBOX_NAME: [str(i.pk) for i in instances], "index": 0},
        follow=True,
    )


def _messages(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


def _stop_audits(instance, outcome: str = "success"):
    return AuditEvent.objects.filter(action="instance.stop", target_id=str(instance.pk), outcome=outcome)


@pytest.fixture
def running(allocator, project, jupyterlab, active_allocation):
    return start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41000)


@pytest.fixture
def stopped(running, platform_admin, active_allocation):
    services.change(for_user(platform_admin), running, "stop")
    node = active_allocation.node
    for task in agents.claim_tasks(node):
        agents.report_task(node, task.pk, succeeded=True)
    running.refresh_from_db()
    assert running.state == "stopped"
    return running


@pytest.fixture
def view_only_staff(db):
    user = UserFactory(is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_appinstance"))
    return user


def test_view_only_staff_see_no_actions_and_a_forged_post_changes_nothing(view_only_staff, running):
    client = _client(view_only_staff)
    page = client.get(CHANGELIST)
    assert page.status_code == 200
    assert running.name in page.content.decode()
    action_form = page.context["action_form"]
    offered = {name for name, _ in action_form.fields["action"].choices} if action_form else set()
    assert not offered & OPERATOR_ACTIONS

    for action in sorted(OPERATOR_ACTIONS):
        response = _run(client, action, running)
        assert response.status_code == 200
        assert not [m for level, m in _messages(response) if level == "success"]
    running.refresh_from_db()
    assert running.state == "running"
    assert running.ui_mode_override == ""
    assert not AuditEvent.objects.filter(
        target_id=str(running.pk), action__startswith="instance.stop"
    ).exists()
    assert not AgentTask.objects.filter(instance=running, action=AgentTask.Action.STOP).exists()


def test_operators_are_offered_the_actions(platform_admin, running):
    action_form = _client(platform_admin).get(CHANGELIST).context["action_form"]
    assert {name for name, _ in action_form.fields["action"].choices} >= OPERATOR_ACTIONS


def test_staff_with_the_change_permission_are_offered_the_actions(running):
    staff = UserFactory(is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_appinstance", "change_appinstance"])
    )
    action_form = _client(staff).get(CHANGELIST).context["action_form"]
    assert {name for name, _ in action_form.fields["action"].choices} >= OPERATOR_ACTIONS


def test_force_stop_stops_a_running_instance_and_audits_it(platform_admin, running):
    response = _run(_client(platform_admin), "force_stop", running)

    assert ("success", f"Stopping 1: {running}.") in _messages(response)
    running.refresh_from_db()
    assert running.state == "stopping"
    assert AgentTask.objects.filter(
        instance=running, action=AgentTask.Action.STOP, status=AgentTask.Status.PENDING
    ).exists()
    [event] = _stop_audits(running)
    assert event.actor == platform_admin.get_username()
    assert event.details == {"previous_state": "running"}


def test_force_stop_of_a_stopped_instance_reports_already_and_is_not_counted(platform_admin, stopped):
    audits_before = _stop_audits(stopped).count()
    tasks_before = AgentTask.objects.filter(instance=stopped).count()

    response = _run(_client(platform_admin), "force_stop", stopped)

    messages = _messages(response)
    assert ("info", f"Already stopped or stopping: {stopped}.") in messages
    assert not [m for level, m in messages if level == "success"]
    stopped.refresh_from_db()
    assert stopped.state == "stopped"
    assert _stop_audits(stopped).count() == audits_before
    assert AgentTask.objects.filter(instance=stopped).count() == tasks_before


def test_a_mixed_selection_reports_each_part(platform_admin, stopped, allocator, project, jupyterlab):
    other = start_instance(allocator, project, stopped.allocation, jupyterlab, host="127.0.0.1", port=41001)
    response = _run(_client(platform_admin), "force_stop", stopped, other)

    messages = _messages(response)
    assert ("info", f"Already stopped or stopping: {stopped}.") in messages
    assert ("success", f"Stopping 1: {other}.") in messages
    other.refresh_from_db()
    assert other.state == "stopping"
    assert _stop_audits(other).count() == 1
