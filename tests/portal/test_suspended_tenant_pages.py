"""A suspended tenant's pages (decision 0078): a banner says it is suspended, why, and
what still works; the launch and allocate buttons are off and say why; a form posted
all the same is refused on the form, and nothing is made."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.runtime.models import AppInstance
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.models import Membership
from tests.factories import AllocationFactory
from tests.support.catalog import publish
from tests.support.members import member

pytestmark = pytest.mark.django_db

REASON = "invoice 2025-10 unpaid"


@pytest.fixture
def suspended(tenant, platform_admin):
    return services.suspend_tenant(principals.for_user(platform_admin), tenant, REASON)


def _page(client, url) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_a_banner_says_the_tenant_is_suspended_why_and_what_still_works(
    as_user, tenant_admin, platform_admin, project, other_tenant_project
):
    client = as_user(tenant_admin)
    assert "data-tenant-suspended" not in _page(client, reverse("project_detail", args=[project.pk]))

    services.suspend_tenant(principals.for_user(platform_admin), project.tenant, REASON)
    for url in (
        reverse("project_detail", args=[project.pk]),
        reverse("allocation_list", args=[project.pk]),
        reverse("tenant_usage", args=[project.tenant.tenant_id]),  # the tenant's own page: its bills
    ):
        page = _page(client, url)
        assert "data-tenant-suspended" in page
        assert f"{project.tenant.name} is suspended</strong>: {REASON}." in page
        assert "release allocations, stop and delete" in page
    # Another tenant's pages say nothing of it.
    outsider = member("tenant_admin", tenant=other_tenant_project.tenant)
    page = _page(as_user(outsider), reverse("project_detail", args=[other_tenant_project.pk]))
    assert "data-tenant-suspended" not in page


def test_the_allocate_and_launch_buttons_are_off_and_say_why(as_user, tenant_admin, project, suspended):
    publish("jupyterlab")
    AllocationFactory(project=project)
    client = as_user(tenant_admin)
    allocations = _page(client, reverse("allocation_list", args=[project.pk]))
    assert "Allocate nodes: the tenant is suspended" in allocations
    assert f'href="{reverse("allocation_create", args=[project.pk])}"' not in allocations
    launch = _page(client, reverse("app_launch", args=[project.pk, "jupyterlab"]))
    assert (
        'disabled aria-describedby="tenant-suspended" data-suspended>Launch Jupyterlab: the tenant is'
        in launch
    )


def test_a_launch_posted_all_the_same_is_refused_on_the_form(as_user, tenant_admin, project, suspended):
    publish("jupyterlab")
    allocation = AllocationFactory(project=project)
    response = as_user(tenant_admin).post(
        reverse("app_launch", args=[project.pk, "jupyterlab"]),
        {"allocation": str(allocation.pk), "version": "1.0.0", "name": "lab"},
    )
    assert response.status_code == 409
    assert "The tenant is suspended." in response.content.decode()
    assert not AppInstance.objects.exists()


def test_adding_a_member_is_refused_on_the_form(as_user, tenant_admin, tenant, project, suspended):
    colleague = member("viewer", tenant=tenant)
    response = as_user(tenant_admin).post(
        reverse("project_members", args=[project.pk]), {"username": colleague.username, "role": "viewer"}
    )
    assert response.status_code == 200  # the members tab again, the refusal on its form
    assert "The tenant is suspended." in response.content.decode()
    assert not Membership.objects.filter(user=colleague, project=project).exists()
