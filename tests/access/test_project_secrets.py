"""User-supplied runtime secrets: written by a project admin, never answered back;
a manifest parameter of type ``secret`` names one at launch, and the node agent
fetches its value over its own channel, as it fetches the app token."""

from __future__ import annotations

import json

import pytest

from apps.access.models import ProjectSecret
from apps.core import crypto, secrets
from apps.core.models import AuditEvent
from apps.runtime.models import AgentTask

pytestmark = pytest.mark.django_db

HF_TOKEN = "hf_gated_model_token_5up3r53cr3t"


@pytest.fixture
def admin_api(api, project_admin):
    api.force_login(project_admin)
    return api


def _put(api, project, name="hf-token", value=HF_TOKEN):
    return api.post(f"/api/v1/projects/{project.pk}/secrets", {"name": name, "value": value}, format="json")


def _launch_vllm(api, allocation, **parameters):
    """vLLM launched on ``allocation`` through the platform API, given ``parameters`` if any."""
    body = {"app": "vllm-openai", "allocation_id": str(allocation.pk)}
    if parameters:
        body["parameters"] = parameters
    return api.post(f"/api/v1/projects/{allocation.project_id}/app-instances", body, format="json")


def test_a_secret_is_written_listed_by_name_replaced_and_deleted(
    admin_api, project, secrets_backend, django_capture_on_commit_callbacks
):
    created = _put(admin_api, project)
    assert created.status_code == 201
    assert set(created.json()) == {"id", "name", "created_by", "created_at", "updated_at"}
    listed = admin_api.get(f"/api/v1/projects/{project.pk}/secrets")
    assert [s["name"] for s in listed.json()["results"]] == ["hf-token"]
    assert HF_TOKEN not in listed.content.decode() + created.content.decode()

    replaced = _put(admin_api, project, value="hf_the_new_one")
    assert replaced.status_code == 200
    secret = ProjectSecret.objects.get()
    assert secrets.store().read(secret.secret_path) == "hf_the_new_one"
    assert [e.action for e in AuditEvent.objects.filter(target_id=str(secret.pk)).order_by("id")] == [
        "project_secret.create",
        "project_secret.update",
    ]
    assert all("value" not in e.details for e in AuditEvent.objects.all())

    with django_capture_on_commit_callbacks(execute=True):
        assert admin_api.delete(f"/api/v1/projects/{project.pk}/secrets/{secret.pk}").status_code == 204
    with pytest.raises(secrets.SecretNotFound):
        secrets.store().read(secret.secret_path)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "../etc", "value": "v"}, "name"),
        ({"name": "x" * 65, "value": "v"}, "name"),
        ({"name": "ok"}, "value"),
        ({"name": "ok", "value": "v" * (64 * 1024 + 1)}, "value"),
    ],
)
def test_bad_input_is_refused_without_echoing_the_value(admin_api, project, body, field):
    response = admin_api.post(f"/api/v1/projects/{project.pk}/secrets", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]
    assert "vvvvvvvvvv" not in response.content.decode()
    assert not ProjectSecret.objects.exists()


def test_the_agent_gets_the_named_secret_never_the_task(
    admin_api, api, project, vllm, active_allocation, secrets_backend
):
    assert _put(admin_api, project).status_code == 201
    launch = _launch_vllm(admin_api, active_allocation, hf_token="hf-token")
    assert launch.status_code == 202, launch.content
    task = AgentTask.objects.get(action="start")
    assert HF_TOKEN not in json.dumps(task.spec)
    assert "{{ secret.hf_token }}" in json.dumps(task.spec)

    node = active_allocation.node
    type(node).objects.filter(pk=node.pk).update(credential_hash=crypto.hash_secret("node-credential"))
    admin_api.logout()
    agent = {"HTTP_AUTHORIZATION": "Node node-credential"}
    claimed = api.get("/api/agent/v1/tasks", {"wait": 0}, **agent)
    assert claimed.status_code == 200
    assert HF_TOKEN not in claimed.content.decode()
    fetched = api.get(f"/api/agent/v1/tasks/{task.pk}/secrets", **agent)
    assert fetched.status_code == 200
    assert fetched.json() == {"hf_token": HF_TOKEN}


def test_launch_naming_a_secret_the_project_lacks_is_refused(admin_api, vllm, active_allocation):
    response = _launch_vllm(admin_api, active_allocation, hf_token="nope")
    assert response.status_code == 400
    assert "hf_token" in response.json()["error"]["details"]["parameters"]
    assert not AgentTask.objects.exists()


def test_without_the_secret_parameter_the_agent_gets_an_empty_value(admin_api, vllm, active_allocation):
    from apps.runtime import agents

    launch = _launch_vllm(admin_api, active_allocation)
    assert launch.status_code == 202
    node = active_allocation.node
    [task] = agents.claim_tasks(node)
    assert agents.task_secrets(node, task.pk)["hf_token"] == ""


def test_a_project_keeps_a_bounded_number_of_secrets(admin_api, project, settings, monkeypatch):
    from apps.access import services

    monkeypatch.setattr(services, "MAX_PER_PROJECT", 3)
    for index in range(3):
        assert _put(admin_api, project, name=f"s{index}").status_code == 201
    refused = _put(admin_api, project, name="one-too-many")
    assert refused.status_code == 409
    assert "at most 3" in refused.json()["error"]["message"]
    assert _put(admin_api, project, name="s0", value="replaced").status_code == 200  # replacing is fine
    assert ProjectSecret.objects.count() == 3
