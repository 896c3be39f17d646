"""Releasing says what it ends: the confirm page names the app instances the release
deletes, asks for the typed hostname while apps run there (the page's check; the
API releases as CONTRACT.md says), and each deleted instance's timeline says which
release deleted it and who asked. The pipeline page shows release steps only once a
release has begun."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.allocations.models import Allocation, Node
from apps.runtime import services
from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from tests.support.fleet import ccp_release
from tests.support.instances import agent_finishes
from tests.support.members import member
from tests.support.snapshots import active_fleet_fixtures

pytestmark = pytest.mark.django_db
globals().update(active_fleet_fixtures())


def launched(user, allocation, name: str, *, private: bool = False) -> AppInstance:
    instance = services.launch(
        principals.for_user(user),
        allocation.project,
        app_slug="jupyterlab",
        allocation_id=allocation.pk,
        name=name,
    ).instance
    if not private:
        AppInstance.objects.filter(pk=instance.pk).update(shared_with_project=True)
    return instance


def release_url(allocation) -> str:
    return reverse("allocation_release", args=[allocation.project_id, allocation.pk])


def events(instance) -> list[str]:
    return list(instance.events.order_by("occurred_at", "pk").values_list("message", flat=True))


def test_the_confirm_page_lists_what_is_deleted_and_asks_for_the_hostname(
    client, allocator, project, active_allocation, jupyterlab, django_capture_on_commit_callbacks
):
    hostname = active_allocation.node.hostname
    notebook = agent_finishes(launched(allocator, active_allocation, "nb-1"))
    stopped = agent_finishes(launched(allocator, active_allocation, "nb-2"))
    services.change(principals.for_user(allocator), stopped, "stop")
    agent_finishes(stopped)
    # A colleague's private instance goes too, and project admins see every instance.
    launched(member("project_admin", project=project), active_allocation, "nb-3", private=True)
    client.force_login(allocator)

    page = client.get(release_url(active_allocation)).content.decode()
    assert "These app instances will be deleted" in page
    assert f'data-instance-id="{notebook.pk}"' in page
    assert ">nb-1</a>" in page
    assert ">nb-2</a>" in page
    assert ">nb-3</a>" in page
    assert 'data-deleted-instances="3"' in page
    assert f"Apps are running on {hostname}" in page
    assert 'name="hostname"' in page

    # Without the hostname, or with another: refused on the field, nothing released.
    for typed in ("", "gpu-nope"):
        response = client.post(release_url(active_allocation), {"drain": "on", "hostname": typed})
        assert response.status_code == 400
        body = response.content.decode()
        assert f"Type {hostname} to release it with the apps that run on it." in body
        assert 'role="alert"' in body
        assert ">nb-1</a>" in body  # still says what it would end
    active_allocation.refresh_from_db()
    assert active_allocation.state == Allocation.State.ACTIVE

    with django_capture_on_commit_callbacks(execute=False):  # the drain is the agent's, played below
        response = client.post(release_url(active_allocation), {"drain": "on", "hostname": f" {hostname} "})
    assert response.status_code == 302
    active_allocation.refresh_from_db()
    assert active_allocation.state == Allocation.State.RELEASING
    assert active_allocation.released_by == allocator.username

    # The drain step: each instance's timeline says why it goes.
    assert services.drain_allocation(active_allocation) == 3
    why = f"deleted because allocation {hostname} was released by {allocator.username}"
    for instance in (notebook, stopped):
        instance.refresh_from_db()
        assert instance.state == AppInstance.State.DECOMMISSIONING
        assert instance.state_reason == why
        assert events(instance)[-1] == why


def test_no_apps_no_typing(client, allocator, active_allocation, django_capture_on_commit_callbacks):
    client.force_login(allocator)
    page = client.get(release_url(active_allocation)).content.decode()
    assert "No app instance runs on it" in page
    assert 'name="hostname"' not in page
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(release_url(active_allocation), {"drain": "on"}).status_code == 302
    active_allocation.refresh_from_db()
    assert active_allocation.state == Allocation.State.RELEASED


def test_a_node_without_agent_deletes_its_instances_at_once_and_says_why(
    client, allocator, active_allocation, jupyterlab, django_capture_on_commit_callbacks
):
    notebook = agent_finishes(launched(allocator, active_allocation, "nb-1"))
    Node.objects.filter(pk=active_allocation.node_id).update(credential_hash="")
    client.force_login(allocator)
    hostname = active_allocation.node.hostname
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(release_url(active_allocation), {"drain": "on", "hostname": hostname})
    assert response.status_code == 302
    notebook.refresh_from_db()
    assert notebook.state == AppInstance.State.DELETED
    assert (
        events(notebook)[-1] == f"deleted because allocation {hostname} was released by {allocator.username}"
    )
    # Its Events tab shows it.
    body = client.get(
        reverse("instance_detail", args=[notebook.project_id, notebook.pk]) + "?tab=events"
    ).content.decode()
    assert f"deleted because allocation {hostname} was released by {allocator.username}" in body


def test_the_api_releases_without_a_typed_hostname(
    api, ccp_issuer, allocator, project, active_allocation, jupyterlab, django_capture_on_commit_callbacks
):
    agent_finishes(launched(allocator, active_allocation, "nb-1"))
    token = ccp_issuer.token(
        {
            "domain_id": project.tenant.tenant_id,
            "project_id": project.project_id,
            "roles": ["Cell Administrator"],
        }
    )
    with django_capture_on_commit_callbacks(execute=False):
        response = ccp_release(api, token, active_allocation.node_id)
    assert response.status_code == 202
    assert response.json()["state"] == "RELEASING"
    active_allocation.refresh_from_db()
    assert active_allocation.released_by  # the token's principal, named in the instances' events


def test_release_steps_show_once_a_release_starts(
    client, allocator, active_allocation, django_capture_on_commit_callbacks
):
    client.force_login(allocator)
    detail = reverse("allocation_detail", args=[active_allocation.project_id, active_allocation.pk])
    page = client.get(detail).content.decode()
    assert 'data-step="provision:agent"' in page
    assert 'data-step="release:' not in page
    assert ">Release</th>" not in page
    with django_capture_on_commit_callbacks(execute=False):
        client.post(release_url(active_allocation), {"drain": "on"})
    page = client.get(detail).content.decode()
    assert 'data-step="release:drain"' in page
    assert 'data-step="release:network_detach"' in page
