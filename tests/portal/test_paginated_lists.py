"""Long lists are paged: a project's members (its own and the tenant-wide ones, each
on its own pages), its service accounts (revoked ones pile up) and an instance's
events. Page 2 shows what page 1 does not; under htmx a page link gets its table
alone; an action on a row keeps the page being shown."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from apps.runtime import services as runtime
from apps.runtime.models import InstanceEvent
from apps.tenancy.models import Membership
from apps.tenancy.principal import for_user
from tests.factories import ServiceAccountFactory, UserFactory

pytestmark = pytest.mark.django_db

ROWS = 30  # more than a page (25)


def _members_url(project) -> str:
    return reverse("project_members", args=[project.pk])


def _member_ids(body: str) -> set[str]:
    return set(re.findall(r'<tr id="member-([0-9a-f-]+)"', body))


def _tenant_names(body: str) -> set[str]:
    table = body.split("Through the tenant", 1)[1]
    return set(re.findall(r"<tr><td>(user\d+)</td>", table))


def _account_ids(body: str) -> set[str]:
    return set(re.findall(r'<tr id="account-([0-9a-f-]+)"', body))


def _htmx(target: str) -> dict:
    return {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}


def test_project_members_are_paged(as_user, tenant_admin, project):
    for _ in range(ROWS):
        Membership.objects.create(user=UserFactory(), tenant=project.tenant, project=project, role="viewer")
    client = as_user(tenant_admin)
    first = client.get(_members_url(project)).content.decode()
    second = client.get(_members_url(project) + "?page=2").content.decode()
    assert "Page 1 of 2 · 30 total" in first
    assert "Page 2 of 2 · 30 total" in second
    assert len(_member_ids(first)) == 25
    assert len(_member_ids(second)) == 5
    assert _member_ids(first).isdisjoint(_member_ids(second))
    assert _member_ids(first) | _member_ids(second) == {
        str(pk) for pk in Membership.objects.filter(project=project).values_list("pk", flat=True)
    }
    assert 'hx-get="?page=2" hx-target="#project-members"' in first

    fragment = client.get(_members_url(project) + "?page=2", **_htmx("project-members")).content.decode()
    assert "<html" not in fragment
    assert "Add a member" not in fragment
    assert _member_ids(fragment) == _member_ids(second)


def test_tenant_wide_members_page_on_their_own(as_user, tenant_admin, project):
    Membership.objects.create(user=UserFactory(), tenant=project.tenant, project=project, role="viewer")
    for _ in range(ROWS):
        Membership.objects.create(user=UserFactory(), tenant=project.tenant, role="viewer")
    client = as_user(tenant_admin)
    first = client.get(_members_url(project)).content.decode()
    second = client.get(_members_url(project) + "?tenant_page=2").content.decode()
    assert len(_tenant_names(first)) == 25
    assert len(_tenant_names(second)) == 6  # and the tenant admin
    assert _tenant_names(first).isdisjoint(_tenant_names(second))
    assert _member_ids(first) == _member_ids(second)  # the project's own list stays where it was
    assert 'hx-get="?tenant_page=2" hx-target="#tenant-members"' in first

    fragment = client.get(
        _members_url(project) + "?page=1&tenant_page=2", **_htmx("tenant-members")
    ).content.decode()
    assert "<html" not in fragment
    assert _tenant_names(fragment) == _tenant_names(second)
    assert 'hx-get="?page=1&amp;tenant_page=1"' in fragment  # the other list's page is kept


def test_removing_a_member_keeps_the_page_shown(as_user, tenant_admin, project):
    for _ in range(ROWS):
        Membership.objects.create(user=UserFactory(), tenant=project.tenant, project=project, role="viewer")
    client = as_user(tenant_admin)
    second = client.get(_members_url(project) + "?page=2").content.decode()
    removed = sorted(_member_ids(second))[0]
    remove_url = reverse("member_remove", args=[project.pk, removed])
    assert f'hx-post="{remove_url}?page=2"' in second
    body = client.post(remove_url + "?page=2", **_htmx("members")).content.decode()
    assert body.lstrip().startswith('<section id="members"')
    assert _member_ids(body) == _member_ids(second) - {removed}


def test_service_accounts_are_paged_active_first(as_user, project_admin, project):
    for n in range(ROWS):
        ServiceAccountFactory(project=project, name=f"old-{n:02d}", revoked_at="2026-01-01T00:00:00Z")
    active = ServiceAccountFactory(project=project, name="zz-active")
    client = as_user(project_admin)
    url = reverse("project_service_accounts", args=[project.pk])
    first = client.get(url).content.decode()
    second = client.get(url + "?page=2").content.decode()
    assert "Page 1 of 2 · 31 total" in first
    assert str(active.pk) in _account_ids(first)  # active accounts lead, whatever their name
    assert len(_account_ids(first)) == 25
    assert len(_account_ids(second)) == 6
    assert _account_ids(first).isdisjoint(_account_ids(second))

    fragment = client.get(url + "?page=2", **_htmx("account-table")).content.decode()
    assert "<html" not in fragment
    assert "Create a service account" not in fragment
    assert _account_ids(fragment) == _account_ids(second)

    revoke_url = reverse("service_account_revoke", args=[project.pk, active.pk])
    assert f'hx-post="{revoke_url}"' in first


def test_instance_events_are_paged(as_user, allocator, project, jupyterlab, active_allocation):
    operation = runtime.launch(
        for_user(allocator), project, app_slug="jupyterlab", allocation_id=active_allocation.pk
    )
    instance = operation.instance
    InstanceEvent.objects.bulk_create(
        InstanceEvent(instance=instance, kind="note", message=f"note {n:02d}") for n in range(60)
    )  # 61 with the launch's "requested"
    client = as_user(allocator)
    url = reverse("instance_detail", args=[project.pk, instance.pk]) + "?tab=events"
    first = client.get(url).content.decode()
    second = client.get(url + "&page=2").content.decode()

    def notes(body):
        return set(re.findall(r'<p class="timeline-message">(note \d\d)</p>', body))

    assert len(notes(first)) == 50
    assert "note 59" in notes(first)  # the newest first
    assert notes(second) == {f"note {n:02d}" for n in range(10)}
    launch_event = f"{allocator.username} launched "
    assert launch_event in second
    assert launch_event not in first
    assert "Older events are not shown" not in first
    assert "Page 1 of 2 · 61 total" in first

    fragment = client.get(url + "&page=2", **_htmx("instance-detail-body")).content.decode()
    assert "<html" not in fragment
    assert notes(fragment) == notes(second)
    # Live updates fetch the page being shown again, not the first.
    detail = reverse("instance_detail", args=[project.pk, instance.pk])
    assert f'data-refresh-url="{detail}?tab=events&amp;page=2"' in fragment
    assert f'data-refresh-url="{detail}?tab=events"' in first
