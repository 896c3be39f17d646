"""A tenant's projects and a project's service accounts are bounded: past the operator's
cap (``GPUAAS_MAX_PROJECTS_PER_TENANT``, ``GPUAAS_MAX_SERVICE_ACCOUNTS_PER_PROJECT``)
a creation answers 409 ``conflict`` with the figures, and a project keeps only its
most recently revoked accounts, so creating and revoking in a loop grows nothing."""

from __future__ import annotations

import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from apps.core.errors import Conflict
from apps.tenancy import services
from apps.tenancy.models import Project, ServiceAccount
from apps.tenancy.principal import for_user
from tests.support.concurrency import a_lock_waiter, at_once
from tests.support.world import INTEGRATION_ROLE

pytestmark = pytest.mark.django_db


def create_project(api, project_id: str):
    return api.post("/api/v1/projects", {"project_id": project_id, "name": project_id}, format="json")


def create_account(api, project, name: str):
    return api.post(
        f"/api/v1/projects/{project.pk}/service-accounts", {"name": name, "role": "viewer"}, format="json"
    )


# --- projects ----------------------------------------------------------------


def test_a_tenant_at_its_project_cap_gets_409_with_the_figures(api, tenant, project, tenant_admin, settings):
    settings.MAX_PROJECTS_PER_TENANT = 2  # ``project`` is the first
    api.force_login(tenant_admin)
    assert create_project(api, "cell-2").status_code == 201

    refused = create_project(api, "cell-3")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "conflict"
    assert error["message"] == "A tenant has at most 2 projects."
    assert error["details"] == {"resource": "projects", "limit": 2, "used": 2, "requested": 1}
    assert not Project.objects.filter(project_id="cell-3").exists()

    # Asking again for one that exists still answers it (CCP retries).
    assert create_project(api, "cell-2").status_code == 200


def test_ccp_adding_a_project_to_a_full_tenant_gets_409(api, ccp_issuer, tenant, project, settings):
    settings.MAX_PROJECTS_PER_TENANT = 1
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token({'roles': [INTEGRATION_ROLE]})}")
    url = "/api/tenants/acme/projects"
    refused = api.post(url, {"project_id": "cell-9", "name": "Cell 9"}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["details"]["resource"] == "projects"
    again = api.post(url, {"project_id": "cell-1", "name": "Cell 1"}, format="json")
    assert again.status_code == 200


def test_onboarding_with_more_projects_than_the_cap_is_refused(api, ccp_issuer, settings):
    settings.MAX_PROJECTS_PER_TENANT = 2
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token({'roles': [INTEGRATION_ROLE]})}")
    projects = [{"project_id": f"cell-{i}", "name": f"Cell {i}"} for i in range(3)]
    body = {"tenant_id": "newco", "name": "NewCo", "realm_name": "newco", "projects": projects}
    refused = api.post("/api/tenants", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {"projects": ["A tenant has at most 2 projects."]}
    assert not Project.objects.filter(tenant__tenant_id="newco").exists()


def _while_one_creation_holds_its_commit(tenant_admin, tenant, first: str, second: str) -> list:
    """Creates project ``first`` and holds its commit until the creation of ``second``
    waits on a lock (or has run through): what each answered, and whether it waited."""
    principal = for_user(tenant_admin)
    created, commit = threading.Event(), threading.Event()

    def create_and_hold_the_commit():
        with transaction.atomic():  # create_project's transaction nests in this one
            result = services.create_project(principal, tenant, project_id=first, name=first)
            created.set()
            commit.wait(timeout=30)
        return result

    def create_the_second():
        created.wait(timeout=30)
        return services.create_project(principal, tenant, project_id=second, name=second)

    def commit_once_the_second_waits():
        created.wait(timeout=30)
        waited = a_lock_waiter()
        commit.set()
        return waited

    return at_once(
        [create_and_hold_the_commit, create_the_second, commit_once_the_second_waits], answers=(Conflict,)
    )


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_project_racing_one_not_yet_committed_for_the_last_place_is_refused(
    tenant, project, tenant_admin, settings
):
    settings.MAX_PROJECTS_PER_TENANT = 2
    first, second, waited = _while_one_creation_holds_its_commit(tenant_admin, tenant, "cell-a", "cell-b")
    assert waited
    assert first.created
    assert isinstance(second, Conflict)
    assert sorted(Project.objects.filter(tenant=tenant).values_list("project_id", flat=True)) == [
        "cell-1",
        "cell-a",
    ]


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_the_same_project_racing_for_the_last_place_is_answered_as_existing(
    tenant, project, tenant_admin, settings
):
    settings.MAX_PROJECTS_PER_TENANT = 2
    first, second, waited = _while_one_creation_holds_its_commit(tenant_admin, tenant, "cell-a", "cell-a")
    assert waited
    assert (first.created, second.created) == (True, False)
    assert second.obj.pk == first.obj.pk


# --- service accounts --------------------------------------------------------


def test_a_project_at_its_service_account_cap_gets_409_until_one_is_revoked(
    api, project, tenant_admin, settings
):
    settings.MAX_SERVICE_ACCOUNTS_PER_PROJECT = 2
    api.force_login(tenant_admin)
    first = create_account(api, project, "ci-1")
    assert first.status_code == 201
    assert create_account(api, project, "ci-2").status_code == 201

    refused = create_account(api, project, "ci-3")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["message"] == "A project has at most 2 active service accounts; revoke one first."
    assert error["details"] == {"resource": "service_accounts", "limit": 2, "used": 2, "requested": 1}
    assert not ServiceAccount.objects.filter(name="ci-3").exists()

    revoked = api.delete(f"/api/v1/projects/{project.pk}/service-accounts/{first.json()['id']}")
    assert revoked.status_code == 204
    assert create_account(api, project, "ci-3").status_code == 201


def test_the_command_refuses_a_project_at_its_service_account_cap(project, settings):
    settings.MAX_SERVICE_ACCOUNTS_PER_PROJECT = 1
    command = ["create_service_account", "--project", str(project.pk), "--role", "viewer"]
    call_command(*command, "--name", "ci-1", stdout=StringIO())
    with pytest.raises(CommandError, match="at most 1 active service accounts"):
        call_command(*command, "--name", "ci-2", stdout=StringIO())
    assert list(ServiceAccount.objects.values_list("name", flat=True)) == ["ci-1"]


def test_a_project_keeps_only_its_most_recently_revoked_accounts(
    tenant_admin, project, other_project, monkeypatch
):
    monkeypatch.setattr(services, "REVOKED_ACCOUNTS_KEPT", 2)
    principal = for_user(tenant_admin)
    elsewhere = services.create_service_account(principal, other_project, name="other", role="viewer").account
    services.revoke_service_account(principal, elsewhere)
    accounts = [
        services.create_service_account(principal, project, name=f"ci-{i}", role="viewer").account
        for i in range(4)
    ]
    for account in accounts[:3]:
        services.revoke_service_account(principal, account)

    kept = ServiceAccount.objects.filter(project=project)
    assert sorted(kept.values_list("name", flat=True)) == ["ci-1", "ci-2", "ci-3"]
    assert kept.get(name="ci-3").is_active
    assert ServiceAccount.objects.filter(pk=elsewhere.pk).exists()  # another project's count
