"""An app's token (its runtime secret) is renewed at every start, and when someone who
could open the app loses access: a member removed, an instance un-shared, an account
deactivated. A running app then restarts with the new token through a ``restart``
operation, audited. A token learned inside the app (a kernel reads it from its own
environment) so opens nothing once the app runs again.

The agent's part is played by the test (``claim_tasks``, ``report_task``); the
real JupyterLab, which refuses the old token afterwards, is in test_agent_jupyterlab.py."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.runtime import agents, selectors, services
from apps.runtime.models import AgentTask, Operation
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership, ServiceAccount
from apps.tenancy.principal import for_user
from tests.support.members import member
from tests.support.proxy import start_instance
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


@pytest.fixture
def commits(django_capture_on_commit_callbacks):
    """Runs what a change does once it commits (the rotation is one of those)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def running(allocator, project, jupyterlab, active_allocation):
    return start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41000)


def token(instance) -> str:
    return selectors.runtime_secret(instance, "token")


def agent_runs(instance, *, port: int) -> list[str]:
    """The agent claims the node's tasks, fetches the secrets of each start and reports
    it done at ``port``; the tokens the starts ran with."""
    node = instance.allocation.node
    started = []
    for task in agents.claim_tasks(node):
        if task.action == AgentTask.Action.START:
            started.append(agents.task_secrets(node, task.pk)["token"])
        agents.report_task(
            node, task.pk, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": port}]
        )
    instance.refresh_from_db()
    return started


def rotations(instance) -> list[dict]:
    return list(
        AuditEvent.objects.filter(action="instance.secrets.rotate", target_id=str(instance.pk)).values_list(
            "details", flat=True
        )
    )


def test_a_started_instance_runs_with_a_new_token(allocator, running):
    first = token(running)
    services.change(for_user(allocator), running, "stop")
    agent_runs(running, port=41000)
    assert running.state == "stopped"

    services.change(for_user(allocator), running, "start")
    [started_with] = agent_runs(running, port=41001)

    assert running.state == "running"
    assert started_with == token(running) != first


def test_removing_a_member_restarts_the_apps_they_could_open_with_a_new_token(
    allocator, tenant_admin, project, other_project, jupyterlab, active_allocation, running, commits
):
    colleague = member("viewer", project=project)
    services.share(for_user(allocator), running, with_project=True)
    # Theirs to open no longer once they leave; the private one they never could.
    private = start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41002)
    old, private_token = token(running), token(private)

    with commits():
        tenancy.remove_member(for_user(tenant_admin), Membership.objects.get(user=colleague))

    running.refresh_from_db()
    assert running.state == "starting"
    restart = Operation.objects.get(instance=running, kind="restart")
    assert restart.requested_by == "platform"
    [started_with] = agent_runs(running, port=41003)
    assert running.state == "running"
    assert started_with == token(running) != old
    assert [r["restarted"] for r in rotations(running)] == [True]
    assert colleague.username in rotations(running)[0]["reason"]
    private.refresh_from_db()
    assert private.state == "running"
    assert token(private) == private_token
    assert not rotations(private)


@pytest.mark.parametrize("how", ["project", "by_name"])
def test_unsharing_rotates_the_token_only_when_someone_loses_the_app(
    allocator, project, running, commits, how
):
    colleague = member("viewer", project=project)
    owner = for_user(allocator)
    share = {"with_project": True} if how == "project" else {"usernames": [colleague.username]}
    unshare = {"with_project": False} if how == "project" else {"revoke_usernames": [colleague.username]}
    services.share(owner, running, **share)
    old = token(running)

    with commits():
        services.share(owner, running, **share)  # shared again: nobody loses anything
    assert token(running) == old
    assert not rotations(running)

    with commits():
        services.share(owner, running, **unshare)
    running.refresh_from_db()
    assert running.state == "starting"
    assert token(running) != old
    assert len(rotations(running)) == 1


def test_unsharing_what_nobody_else_opened_restarts_nothing(allocator, running, commits):
    with commits():
        services.share(for_user(allocator), running, with_project=False)
    running.refresh_from_db()
    assert running.state == "running"
    assert not rotations(running)


def test_a_deactivated_user_takes_no_working_token_along(allocator, project, running, commits):
    colleague = member("project_admin", project=project)
    old = token(running)
    with commits():
        colleague.is_active = False
        colleague.save()
    running.refresh_from_db()
    assert running.state == "starting"
    assert token(running) != old


def test_a_stopped_app_gets_its_new_token_now_and_no_restart(allocator, project, running, commits):
    colleague = member("project_admin", project=project)
    services.change(for_user(allocator), running, "stop")
    agent_runs(running, port=41000)
    old = token(running)
    with commits():
        Membership.objects.filter(user=colleague).delete()
    running.refresh_from_db()
    assert running.state == "stopped"
    assert token(running) != old
    assert [r["restarted"] for r in rotations(running)] == [False]
    assert not AgentTask.objects.filter(instance=running, status=AgentTask.Status.PENDING).exists()


def test_a_start_that_reports_after_a_restart_began_does_not_move_the_instance(
    allocator, project, jupyterlab, active_allocation, commits
):
    """The agent claimed the launch's start and fetched the old token; the restart's
    start comes after it on the node. The first report must not make the instance
    running with the old token and the old port."""
    colleague = member("project_admin", project=project)
    operation = services.launch(
        for_user(allocator), project, app_slug=jupyterlab.slug, allocation_id=active_allocation.pk
    )
    instance, node = operation.instance, active_allocation.node
    [first] = agents.claim_tasks(node)
    old = agents.task_secrets(node, first.pk)["token"]

    with commits():
        Membership.objects.filter(user=colleague).delete()
    agents.report_task(
        node, first.pk, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": 41000}]
    )
    instance.refresh_from_db()
    assert instance.state == "starting"

    [started_with] = agent_runs(instance, port=41001)
    assert instance.state == "running"
    assert started_with != old
    assert instance.endpoints.get().port == 41001
    assert instance.proxy_routes.get().upstream_port == 41001


def test_revoking_a_service_account_restarts_no_app(allocator, project, running, commits):
    """Service accounts open no app (UI sessions are for people): no token to rotate."""
    account = tenancy.create_service_account(
        for_user(allocator), project, name="ci", role="project_admin"
    ).account
    with commits():
        tenancy.revoke_service_account(for_user(allocator), ServiceAccount.objects.get(pk=account.pk))
    running.refresh_from_db()
    assert running.state == "running"
    assert not rotations(running)
