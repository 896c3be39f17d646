"""Launching and driving app instances through the platform API."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from apps.core.models import AuditEvent
from apps.runtime import agents, selectors
from apps.runtime.models import AgentTask, AppInstance, Operation, RuntimeSecret
from apps.tenancy import services as tenancy
from apps.tenancy.principal import Grant, Principal
from tests.factories import shipped_manifest
from tests.support.catalog import publish
from tests.support.instances import agent_finishes, ask_launch
from tests.support.members import member
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


def test_launch_returns_an_operation_and_the_agent_brings_it_to_running(
    api, allocator, project, jupyterlab, active_allocation
):
    api.force_login(allocator)
    response = ask_launch(api, project, active_allocation, parameters={"idle_minutes": 30})
    assert response.status_code == 202, response.content
    body = response.json()
    operation = api.get(f"/api/v1/operations/{body['operation_id']}").json()
    assert operation["state"] == "pending"
    assert operation["kind"] == "launch"
    instance = AppInstance.objects.get(pk=body["instance_id"])
    assert instance.state == "requested"
    assert instance.parameters == {
        "default_path": "/lab",
        "idle_minutes": 30,
    }

    agent_finishes(instance)
    detail = api.get(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}").json()
    assert detail["state"] == "running"
    assert detail["ui_mode"] == "embedded"
    assert detail["endpoints"] == [
        {
            "name": "web",
            "protocol": "http",
            "exposure": "platform_proxy",
            "url": f"http://127.0.0.1:8000/w/{instance.pk}/web/",
            "access": None,
            "local_url": None,
        }
    ]
    assert detail["members"][0]["hostname"] == active_allocation.node.hostname
    assert api.get(f"/api/v1/operations/{body['operation_id']}").json()["state"] == "succeeded"
    timeline = api.get(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}/events").json()["results"]
    assert [e["to_state"] for e in reversed(timeline)] == ["requested", "starting", "running"]

    stop = api.post(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}/stop")
    assert stop.status_code == 202
    agent_finishes(instance)
    assert instance.state == "stopped"
    assert api.post(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}/stop").status_code == 202
    assert AgentTask.objects.filter(instance=instance, action="stop").count() == 1  # asked twice, done once

    assert api.delete(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}").status_code == 202
    agent_finishes(instance)
    assert instance.state == "deleted"
    assert not RuntimeSecret.objects.filter(instance=instance).exists()


def test_failed_start_shows_the_reason(api, allocator, project, jupyterlab, active_allocation):
    api.force_login(allocator)
    body = ask_launch(api, project, active_allocation).json()
    instance = AppInstance.objects.get(pk=body["instance_id"])
    agent_finishes(instance, succeeded=False, error="jupyter-lab: command not found")
    assert instance.state == "failed"
    assert instance.state_reason == "jupyter-lab: command not found"
    assert Operation.objects.get(pk=body["operation_id"]).error == "jupyter-lab: command not found"


def test_parameters_are_validated_per_field(api, allocator, project, jupyterlab, active_allocation):
    api.force_login(allocator)
    response = ask_launch(api, project, active_allocation, parameters={"idle_minutes": 1, "bogus": True})
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "parameters": {"idle_minutes": ["Must be at least 5."], "bogus": ["Not a parameter of this app."]}
    }
    assert not AppInstance.objects.exists()


def test_a_whole_number_too_large_for_a_float_is_a_400(
    api, allocator, project, jupyterlab, active_allocation
):
    """Its check turned it into a float, which overflowed (a 500)."""
    api.force_login(allocator)
    where = f'"app": "jupyterlab", "allocation_id": "{active_allocation.pk}"'
    body = f'{{{where}, "parameters": {{"idle_minutes": 1{"0" * 400}}}}}'  # JSON reads an int
    response = api.post(f"/api/v1/projects/{project.pk}/app-instances", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"parameters": {"idle_minutes": ["Must be at most 1440."]}}
    assert not AppInstance.objects.exists()


def test_a_number_too_large_for_a_float_is_a_400(api, allocator, project, active_allocation):
    """JSON reads 1e400 as infinity: a number parameter without a maximum took it, and
    PostgreSQL refused to keep it (a 500)."""
    manifest = shipped_manifest("jupyterlab")
    manifest["parameters"].append({"name": "ratio", "label": "Ratio", "type": "number"})
    publish("ratio-lab", manifest)
    api.force_login(allocator)
    body = (
        f'{{"app": "ratio-lab", "allocation_id": "{active_allocation.pk}", "parameters": {{"ratio": 1e400}}}}'
    )
    response = api.post(f"/api/v1/projects/{project.pk}/app-instances", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"parameters": {"ratio": ["Must be a number."]}}
    assert not AppInstance.objects.exists()


def test_a_nul_byte_in_a_text_parameter_is_a_400(api, allocator, project, active_allocation):
    """A text parameter without a pattern took it, and PostgreSQL refused to keep it (a 500)."""
    manifest = shipped_manifest("jupyterlab")
    manifest["parameters"].append({"name": "greeting", "label": "Greeting", "type": "string"})
    publish("greeting-lab", manifest)
    api.force_login(allocator)
    response = api.post(
        f"/api/v1/projects/{project.pk}/app-instances",
        {
            "app": "greeting-lab",
            "allocation_id": str(active_allocation.pk),
            "parameters": {"greeting": "hi\x00"},
        },
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"parameters": {"greeting": ["Has a NUL byte."]}}
    assert not AppInstance.objects.exists()


def test_allocation_must_be_active_and_in_the_project(
    api, allocator, project, other_project, jupyterlab, active_allocation
):
    api.force_login(member("tenant_admin", tenant=project.tenant))
    response = ask_launch(api, other_project, active_allocation)
    assert response.status_code == 400
    assert "allocation_id" in response.json()["error"]["details"]
    type(active_allocation).objects.filter(pk=active_allocation.pk).update(state="RELEASING")
    assert ask_launch(api, project, active_allocation).json()["error"]["code"] == "invalid_state"


def test_app_that_does_not_fit_the_node_is_refused(api, allocator, project, vllm, active_allocation):
    api.force_login(allocator)
    for _ in range(8):  # 8 one-GPU vLLM servers fill the 8-GPU node
        assert ask_launch(api, project, active_allocation, app="vllm-openai").status_code == 202
        AppInstance.objects.filter(state="requested").update(state="running")
    response = ask_launch(api, project, active_allocation, app="vllm-openai")
    assert response.status_code == 409
    assert "0 of 8 are free" in response.json()["error"]["message"]


def test_launches_in_flight_are_bounded(api, settings, allocator, project, jupyterlab, active_allocation):
    settings.LAUNCH_LIMIT_PER_NODE = 2
    api.force_login(allocator)
    assert ask_launch(api, project, active_allocation).status_code == 202
    assert ask_launch(api, project, active_allocation).status_code == 202
    response = ask_launch(api, project, active_allocation)
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert response.json()["error"]["code"] == "rate_limited"


def test_entitlement_is_required(api, allocator, project, active_allocation, db):
    from tests.support.catalog import publish

    app = publish("netdata", entitled_to_all=False)
    api.force_login(allocator)
    assert api.get("/api/v1/catalog/apps/netdata").status_code == 404  # not entitled: not even visible
    response = ask_launch(api, project, active_allocation, app="netdata")
    assert response.status_code == 404
    assert not AppInstance.objects.exists()

    from apps.catalog import services as catalog

    other_project = type(project).objects.create(tenant=project.tenant, project_id="other", name="Other")
    catalog.entitle(None, app, project.tenant, other_project)  # entitled in another project only
    tenant_admin = member("tenant_admin", tenant=project.tenant)
    api.force_login(tenant_admin)
    assert api.get("/api/v1/catalog/apps/netdata").status_code == 200
    response = ask_launch(api, project, active_allocation, app="netdata")
    assert response.status_code == 403
    catalog.entitle(None, app, project.tenant)
    assert ask_launch(api, project, active_allocation, app="netdata").status_code == 202


def test_catalog_lists_entitled_apps_with_manifests(api, allocator, jupyterlab):
    api.force_login(allocator)
    listing = api.get("/api/v1/catalog/apps").json()
    assert [app["slug"] for app in listing["results"]] == ["jupyterlab"]
    version = api.get("/api/v1/catalog/apps/jupyterlab/versions/1.0.0").json()
    assert version["manifest"]["artifacts"][0]["digest"].startswith("sha256:")


def test_service_account_launches_and_stops_with_its_token(
    api, allocator, project, jupyterlab, active_allocation
):
    operator = Principal(kind="test", key="test", name="test", grants=[Grant("platform_admin")])
    issued = tenancy.create_service_account(operator, project, name="ci-bot", role="project_admin")
    form = {
        "grant_type": "client_credentials",
        "client_id": issued.account.client_id,
        "client_secret": issued.client_secret,
    }
    token = api.post(
        "/api/v1/auth/token", urlencode(form), content_type="application/x-www-form-urlencoded"
    ).json()["access_token"]
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = api.post(
        f"/api/v1/projects/{project.pk}/app-instances",
        {"app": "jupyterlab", "allocation_id": str(active_allocation.pk)},
        format="json",
        **bearer,
    )
    assert response.status_code == 202, response.content
    instance = AppInstance.objects.get(pk=response.json()["instance_id"])
    assert instance.created_by == "sa:ci-bot"
    assert instance.owner is None
    agent_finishes(instance)
    stop = api.post(f"/api/v1/projects/{project.pk}/app-instances/{instance.pk}/stop", **bearer)
    assert stop.status_code == 202


def test_instances_are_private_until_shared_and_never_across_projects(
    api, allocator, project, other_project, other_tenant_project, jupyterlab, active_allocation
):
    api.force_login(allocator)
    instance_id = ask_launch(api, project, active_allocation).json()["instance_id"]
    url = f"/api/v1/projects/{project.pk}/app-instances/{instance_id}"
    viewer = member("viewer", project=project)
    colleague = member("viewer", project=other_project)
    stranger = member("tenant_admin", tenant=other_tenant_project.tenant)
    for outsider in (viewer, colleague, stranger):
        api.force_login(outsider)
        assert api.get(url).status_code == 404
    api.force_login(allocator)
    shared = api.post(
        f"{url}/share", {"with_project": True, "usernames": [colleague.username]}, format="json"
    )
    assert shared.status_code == 200, shared.content
    api.force_login(viewer)
    assert api.get(url).status_code == 200
    assert api.post(f"{url}/stop").status_code == 403  # seeing is not managing
    api.force_login(colleague)
    assert api.get(url).status_code == 200  # shared by name with a user of the same tenant
    api.force_login(allocator)
    refused = api.post(f"{url}/share", {"usernames": [stranger.username]}, format="json")
    assert refused.status_code == 400  # never across tenants
    api.force_login(stranger)
    assert api.get(url).status_code == 404


def test_a_share_revokes_a_bounded_number_of_users(api, allocator, project, jupyterlab, active_allocation):
    """Revoked names are not looked up: 10,000 of them went whole into one audit event."""
    api.force_login(allocator)
    instance_id = ask_launch(api, project, active_allocation).json()["instance_id"]
    url = f"/api/v1/projects/{project.pk}/app-instances/{instance_id}/share"
    names = [f"{i:0150d}" for i in range(10_000)]
    refused = api.post(url, {"revoke_usernames": names}, format="json")
    assert refused.status_code == 400
    assert "revoke_usernames" in refused.json()["error"]["details"]
    assert not AuditEvent.objects.filter(action="instance.share").exists()


def test_no_secret_in_any_response(api, allocator, project, jupyterlab, active_allocation):
    api.force_login(allocator)
    body = ask_launch(api, project, active_allocation).json()
    instance = AppInstance.objects.get(pk=body["instance_id"])
    token = selectors.runtime_secret(instance, "token")
    assert token
    assert len(token) > 20
    [task] = AgentTask.objects.filter(instance=instance)
    assert token not in str(task.spec)  # the task references the secret, never carries it
    agent_finishes(instance)
    base = f"/api/v1/projects/{project.pk}/app-instances"
    for path in (
        base,
        f"{base}/{instance.pk}",
        f"{base}/{instance.pk}/events",
        f"/api/v1/operations/{body['operation_id']}",
    ):
        assert token not in api.get(path).content.decode()


def test_node_without_an_agent_is_refused_at_launch(api, allocator, project, jupyterlab, active_allocation):
    type(active_allocation.node).objects.filter(pk=active_allocation.node_id).update(credential_hash="")
    api.force_login(allocator)
    response = ask_launch(api, project, active_allocation)
    assert response.status_code == 409
    assert "No node agent has enrolled" in response.json()["error"]["message"]


def test_a_task_whose_agent_died_before_reporting_is_handed_to_the_agent_that_returns(
    api, allocator, project, jupyterlab, active_allocation
):
    """The agent asks for work only once it has reported what it was given: a task
    still claimed when it asks was lost (the agent was killed while running it) and
    comes again, once, so the launch completes rather than waiting out the timeout."""
    api.force_login(allocator)
    instance = AppInstance.objects.get(pk=ask_launch(api, project, active_allocation).json()["instance_id"])
    node = instance.allocation.node
    [lost] = agents.claim_tasks(node)  # and the agent is killed
    first_claim = AgentTask.objects.get(pk=lost.pk).claimed_at

    [again] = agents.claim_tasks(node)  # the agent back, asking
    assert again.pk == lost.pk
    agents.report_task(
        node, again.pk, succeeded=True, endpoints=[{"name": "web", "host": "127.0.0.1", "port": 1}]
    )
    assert agents.claim_tasks(node) == []
    instance.refresh_from_db()
    assert instance.state == "running"
    assert AgentTask.objects.get().claimed_at == first_claim  # the timeout counts from the first claim


def test_a_claim_the_agent_never_reports_fails_after_the_timeout(
    api, allocator, project, jupyterlab, active_allocation
):
    from datetime import timedelta

    from django.utils import timezone

    api.force_login(allocator)
    instance = AppInstance.objects.get(pk=ask_launch(api, project, active_allocation).json()["instance_id"])
    agents.claim_tasks(instance.allocation.node)
    assert agents.expire_stale_claims() == 0
    assert agents.expire_stale_claims(now=timezone.now() + timedelta(hours=1)) == 1
    instance.refresh_from_db()
    assert instance.state == "failed"
    assert "never reported back" in instance.state_reason
