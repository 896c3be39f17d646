"""Project access credentials (CONTRACT.md "Host access and secrets"): an ed25519 key
pair in OpenSSH formats, the private key answered once at creation and then only to
the project's app controller (a project_admin service account of that project)."""

from __future__ import annotations

import subprocess

import pytest

from apps.access.models import AccessCredential
from apps.core import secrets
from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import services as tenancy
from tests.support.members import member

pytestmark = pytest.mark.django_db


def _bearer(api, project, role: str, operator) -> None:
    issued = tenancy.create_service_account(
        principals.for_user(operator), project, name=f"controller-{role}", role=role
    )
    token, _ = tenancy.issue_token(issued.account.client_id, issued.client_secret)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def created(api, project, project_admin, secrets_backend):
    api.force_login(project_admin)
    response = api.post(
        f"/api/v1/projects/{project.pk}/access-credentials", {"name": "controller"}, format="json"
    )
    assert response.status_code == 201, response.content
    api.logout()
    return response


def test_creation_answers_an_openssh_key_pair_once(api, project, project_admin, created, tmp_path):
    body = created.json()
    assert set(body) >= {"id", "name", "public_key", "fingerprint", "private_key"}
    assert created["Cache-Control"] == "no-store"
    key_file = tmp_path / "id_ed25519"
    key_file.write_text(body["private_key"])
    key_file.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", key_file], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == body["public_key"].split()[:2]
    assert body["public_key"].startswith("ssh-ed25519 ")
    listed = subprocess.run(["ssh-keygen", "-l", "-f", key_file], capture_output=True, text=True, check=True)
    assert listed.stdout.split()[1] == body["fingerprint"]

    api.force_login(project_admin)
    listing = api.get(f"/api/v1/projects/{project.pk}/access-credentials").json()["results"]
    assert [c["name"] for c in listing] == ["controller"]
    assert "private_key" not in listing[0]
    assert body["private_key"] not in str(listing)
    assert AuditEvent.objects.filter(action="access_credential.create", target_id=body["id"]).exists()


def test_a_second_credential_of_the_same_name_is_a_conflict(api, project, project_admin, created):
    api.force_login(project_admin)
    again = api.post(
        f"/api/v1/projects/{project.pk}/access-credentials", {"name": "controller"}, format="json"
    )
    assert again.status_code == 409
    assert AccessCredential.objects.count() == 1
    assert len(secrets.store().paths()) == len(set(secrets.store().paths()))  # no orphaned key


def test_the_project_controller_receives_the_key_audited(api, project, created, platform_admin):
    _bearer(api, project, "project_admin", platform_admin)
    cid = created.json()["id"]
    response = api.post(
        f"/api/v1/projects/{project.pk}/access-credentials/{cid}/deliver",
        {"purpose": "bootstrap ssh for the slurm controller"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "private_key": created.json()["private_key"],
        "public_key": created.json()["public_key"],
    }
    event = AuditEvent.objects.get(action="access_credential.deliver", outcome="success")
    assert event.actor == "sa:controller-project_admin"
    assert event.actor_type == "service_account"
    assert event.details["purpose"] == "bootstrap ssh for the slurm controller"
    assert event.target_id == cid
    assert event.occurred_at is not None


@pytest.mark.parametrize("who", ["human_project_admin", "viewer_service_account", "tenant_admin"])
def test_delivery_is_refused_to_everyone_else(api, project, tenant, created, platform_admin, who):
    if who == "human_project_admin":
        api.force_login(member("project_admin", project=project))
    elif who == "tenant_admin":
        api.force_login(member("tenant_admin", tenant=tenant))
    else:
        _bearer(api, project, "viewer", platform_admin)
    cid = created.json()["id"]
    response = api.post(f"/api/v1/projects/{project.pk}/access-credentials/{cid}/deliver", {}, format="json")
    assert response.status_code == 403
    assert "private_key" not in response.content.decode()
    assert AuditEvent.objects.filter(action="access_credential.deliver", outcome="denied").count() == 1


def test_a_service_account_of_another_project_does_not_see_it(
    api, project, other_project, created, platform_admin
):
    _bearer(api, other_project, "project_admin", platform_admin)
    cid = created.json()["id"]
    response = api.post(f"/api/v1/projects/{project.pk}/access-credentials/{cid}/deliver", {}, format="json")
    assert response.status_code == 404
    # Nor through its own project's URL.
    response = api.post(
        f"/api/v1/projects/{other_project.pk}/access-credentials/{cid}/deliver", {}, format="json"
    )
    assert response.status_code == 404


def test_deleting_removes_the_private_key(
    api, project, project_admin, created, django_capture_on_commit_callbacks
):
    credential = AccessCredential.objects.get()
    api.force_login(project_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"/api/v1/projects/{project.pk}/access-credentials/{credential.pk}")
    assert response.status_code == 204
    with pytest.raises(secrets.SecretNotFound):
        secrets.store().read(credential.secret_path)
    assert not AccessCredential.objects.exists()
    assert AuditEvent.objects.filter(action="access_credential.delete", target_id=str(credential.pk)).exists()
