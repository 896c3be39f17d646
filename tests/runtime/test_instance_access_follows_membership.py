"""An owner reaches their instance through their membership of its project, not
through ownership alone (decision 0011): removed from the project, they lose the
detail page, the API, stop/start/delete and the app's UI session, whatever roles
they keep elsewhere in the tenant; the project's admins keep the instance."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.proxy import sessions
from apps.proxy.models import ProxyRoute
from apps.runtime import services
from apps.tenancy import services as tenancy
from apps.tenancy.models import Membership
from apps.tenancy.principal import Grant, Principal, for_user
from tests.support.members import member
from tests.support.proxy import login_session, mint_ticket, start_instance
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


def _urls(instance) -> dict:
    base = f"/api/v1/projects/{instance.project_id}/app-instances"
    return {
        "list": base,
        "detail": f"{base}/{instance.pk}",
        "stop": f"{base}/{instance.pk}/stop",
        "ui": f"/api/v1/workloads/{instance.pk}/ui/session",
        "page": reverse("instance_detail", args=[instance.project_id, instance.pk]),
    }


def _remove_from_project(owner, project, tenant_admin) -> None:
    """What a tenant admin's Remove on the Members tab does."""
    tenancy.remove_member(for_user(tenant_admin), Membership.objects.get(user=owner, project=project))


@pytest.fixture
def running(allocator, project, jupyterlab, active_allocation):
    return start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41000)


def test_an_owner_removed_from_the_project_loses_the_instance(
    api, client, allocator, tenant_admin, project, other_project, running
):
    # Still a viewer of another project of the same tenant after the removal.
    Membership.objects.create(user=allocator, tenant=project.tenant, project=other_project, role="viewer")
    urls = _urls(running)
    api.force_login(allocator)
    client.force_login(allocator)
    assert api.get(urls["detail"]).status_code == 200
    assert client.get(urls["page"]).status_code == 200

    _remove_from_project(allocator, project, tenant_admin)

    assert api.get(urls["detail"]).status_code == 404
    assert client.get(urls["page"]).status_code == 404
    assert api.post(urls["stop"]).status_code == 404
    assert api.delete(urls["detail"]).status_code == 404
    assert api.post(urls["ui"], {}, format="json").status_code == 404
    assert not services.may_manage(for_user(allocator), running)
    running.refresh_from_db()
    assert running.state == "running"

    # The project's admins keep it, and can stop it.
    api.force_login(tenant_admin)
    assert api.get(urls["detail"]).status_code == 200
    assert api.post(urls["stop"]).status_code == 202


def test_an_open_ui_session_ends_when_the_owner_leaves_the_project(
    allocator, tenant_admin, project, other_project, running
):
    Membership.objects.create(user=allocator, tenant=project.tenant, project=other_project, role="viewer")
    route = ProxyRoute.objects.get(instance=running)
    session = login_session(allocator)
    payload = sessions.read_cookie(
        sessions.exchange(mint_ticket(allocator, running, session)["ticket"], route.host).cookie
    )

    def decision():
        cached, generations = sessions.cached_decision(str(route.pk), str(running.pk), payload)
        return cached or sessions.decide(str(route.pk), str(running.pk), payload, generations)

    assert decision().allowed
    _remove_from_project(allocator, project, tenant_admin)
    refused = decision()
    assert not refused.allowed
    assert refused.status == 403


def test_an_owner_who_still_views_the_project_keeps_managing_their_instance(
    api, allocator, tenant_admin, project, running
):
    # Moved from project admin to a tenant-wide viewer: no admin role anywhere, but
    # still a member who views the project's instances.
    tenancy.grant_tenant_role(for_user(tenant_admin), project.tenant, user=allocator, role="viewer")
    _remove_from_project(allocator, project, tenant_admin)
    urls = _urls(running)
    api.force_login(allocator)
    assert api.get(urls["detail"]).status_code == 200
    assert str(running.pk) in {row["id"] for row in api.get(urls["list"]).json()["results"]}
    assert api.post(urls["stop"]).status_code == 202
    running.refresh_from_db()
    assert running.state == "stopping"


def test_a_viewer_of_another_project_does_not_see_its_private_instances(
    api, allocator, project, other_project, running
):
    colleague = member("viewer", project=other_project)
    api.force_login(colleague)
    assert api.get(_urls(running)["detail"]).status_code == 404


def test_a_platform_wide_viewer_sees_shared_instances_only(
    allocator, project, jupyterlab, active_allocation, running
):
    """CCP's integration role views every project like a member: what is shared with
    the project, not the private instances of its people."""
    shared = start_instance(allocator, project, active_allocation, jupyterlab, host="127.0.0.1", port=41001)
    services.share(for_user(allocator), shared, with_project=True)
    integration = Principal(
        kind="service_account", key="sa:ccp", name="sa:ccp", grants=[Grant("platform_integration")]
    )
    assert list(services.visible_instances(integration)) == [shared]
    assert services.get_instance(integration, project.pk, shared.pk) == shared
