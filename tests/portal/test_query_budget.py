"""Pages cost a fixed number of queries whatever their length (no N+1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.allocations.models import Allocation
from apps.core.models import AuditEvent
from apps.proxy.models import ProxyPool, ProxyRoute
from apps.runtime.models import AppInstance
from apps.tenancy import policy
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from apps.tenancy.roles import Perm
from tests.factories import (
    AppInstanceFactory,
    FlavorFactory,
    ProjectFactory,
    ServiceAccountFactory,
    UserFactory,
    shipped_manifest,
)
from tests.support.catalog import publish
from tests.support.fleet import made_allocation, make_nodes, troubled_fleet
from tests.support.pages import client_for


@pytest.fixture(autouse=True)
def _process_caches_warm(tenant_admin):
    """A web process answers many requests, and its first fills the per-process caches
    (content types, django-guardian's permission lookups) that the budgets leave out:
    warmed here, a budget does not depend on which test its worker ran first."""
    scope = policy.restrict(AppInstance.objects.all(), principals.for_user(tenant_admin), Perm.INSTANCE_VIEW)
    list(scope[:1])


# Session, user, the caller's memberships and the switcher's projects, then the page's own
# queries; the fixtures fill each page with dozens of rows, so an N+1 blows these at once.
PROJECT_LIST_BUDGET = 6
AUDIT_BUDGET = 10
PROJECT_PAGE_BUDGET = 12  # the members tab pages two lists: a COUNT for each
# The firing alerts panel: one query; the tiles: the live allocations, the rates that
# price them, the live app instances and their routes.
DASHBOARD_BUDGET = 17
INSTANCE_LIST_BUDGET = 9  # its rows' Open actions: the routes in one query
# The dashboard chart measures each of its 14 days as a window: per day the allocations
# and the tenant's storage, and on a day with use their projects and flavors (in bulk),
# whatever the number of projects; the fixture uses two of the days (36 queries).
USAGE_CHART_BUDGET = 5 + 14 * 4
# The usage page's chart prices each day of the month as the export prices a month: the
# rates once, then per day the same queries as a day of the dashboard chart (71 here).
CHARGES_CHART_BUDGET = 6 + 31 * 4
# The operations front page (the admin index): session, user, the recent actions, and one
# query per panel (nodes by flavor and state, offline agents, failed and stuck allocations,
# dead letters, firing alerts, the temperature rules and readings, the open XID events).
OPERATIONS_BUDGET = 11


def _viewer_and_account(project, n: int) -> None:
    """A viewer and a viewer service account (the ``n``th) on ``project``: a row of each list."""
    Membership.objects.create(user=UserFactory(), tenant=project.tenant, project=project, role="viewer")
    ServiceAccountFactory(project=project, name=f"sa-{n}")


def _fill_tenant(tenant, projects: int):
    for n in range(projects):
        _viewer_and_account(ProjectFactory(tenant=tenant), n)


def _fill_trail(project, events: int):
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                actor=f"user{n}",
                actor_type="user",
                action="member.add",
                outcome="success",
                correlation_id=f"c{n}",
                tenant_id=project.tenant_id,
                project_id=project.pk,
            )
            for n in range(events)
        ]
    )


def test_project_list(tenant_admin, as_user, tenant, django_assert_max_num_queries):
    _fill_tenant(tenant, 30)
    client = as_user(tenant_admin)
    with django_assert_max_num_queries(PROJECT_LIST_BUDGET):
        response = client.get(reverse("project_list"))
    assert response.status_code == 200
    assert response.content.count(b"<tr>") == 26


def test_audit_page(tenant_admin, as_user, tenant, project, other_project, django_assert_max_num_queries):
    _fill_trail(project, 40)
    _fill_trail(other_project, 40)
    client = as_user(tenant_admin)
    with django_assert_max_num_queries(AUDIT_BUDGET):
        response = client.get(reverse("audit_log"))
    assert response.status_code == 200
    assert b"Page 1 of 2" in response.content
    with django_assert_max_num_queries(AUDIT_BUDGET):
        response = client.get(reverse("audit_log") + f"?project={project.pk}&outcome=success&page=1")
    assert response.status_code == 200


def test_project_page(tenant_admin, as_user, project, django_assert_max_num_queries):
    for n in range(20):
        _viewer_and_account(project, n)
    client = as_user(tenant_admin)
    with django_assert_max_num_queries(PROJECT_PAGE_BUDGET):
        members = client.get(reverse("project_members", args=[project.pk]))
    assert members.status_code == 200
    with django_assert_max_num_queries(PROJECT_PAGE_BUDGET):
        service_accounts = client.get(reverse("project_service_accounts", args=[project.pk]))
    assert service_accounts.status_code == 200


def _fill_running(project, count: int) -> None:
    """``count`` active allocations, each with a running app behind the proxy."""
    pool = ProxyPool.objects.create(name="budget")
    flavor = FlavorFactory()
    version = publish("budget-app", shipped_manifest("jupyterlab")).latest_version()
    for n, node in enumerate(make_nodes(flavor, count, prefix="tile")):
        allocation = made_allocation(
            project, node, flavor, timezone.now() - timedelta(hours=n + 1), state=Allocation.State.ACTIVE
        )
        instance = AppInstanceFactory(allocation=allocation, app_version=version, state="running")
        ProxyRoute.objects.create(
            instance=instance,
            endpoint_name="web",
            pool=pool,
            mode="path_prefix",
            slug=f"tile-{n}",
            public_url=f"http://127.0.0.1/w/{instance.pk}/web/",
        )


def test_dashboard(tenant_admin, as_user, tenant, django_assert_max_num_queries):
    _fill_tenant(tenant, 12)
    client = as_user(tenant_admin)
    with django_assert_max_num_queries(DASHBOARD_BUDGET):
        response = client.get("/")
    assert response.status_code == 200
    assert b'data-empty="running"' in response.content


@pytest.mark.parametrize("running", [1, 10])
def test_dashboard_tiles(running, tenant_admin, as_user, tenant, project, django_assert_max_num_queries):
    _fill_tenant(tenant, 4)
    _fill_running(project, running)
    client = as_user(tenant_admin)
    with django_assert_max_num_queries(DASHBOARD_BUDGET):
        response = client.get("/")
    body = response.content.decode()
    assert body.count("data-allocation-id=") == running
    assert body.count("data-open-app") == running


@pytest.mark.parametrize("running", [1, 10])
def test_instance_list(running, tenant_admin, as_user, project, django_assert_max_num_queries):
    _fill_running(project, running)
    client = as_user(tenant_admin)
    url = reverse("instance_list", args=[project.pk])
    client.get(url)  # the session already names the current project
    with django_assert_max_num_queries(INSTANCE_LIST_BUDGET):
        response = client.get(url)
    assert response.content.decode().count("data-open-app") == running


def _fill_usage(tenant, projects: int, midnight=None):
    """``projects`` projects, each with a node used either side of ``midnight`` (today's)."""
    flavor = FlavorFactory()
    midnight = midnight or timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    for n, node in enumerate(make_nodes(flavor, projects, prefix="budget")):
        project = ProjectFactory(tenant=tenant, project_id=f"used-{n}")
        made_allocation(project, node, flavor, midnight - timedelta(hours=2), midnight + timedelta(minutes=1))


def test_the_dashboards_usage_chart_data(billing_admin, as_user, tenant, django_assert_max_num_queries):
    _fill_usage(tenant, 12)
    client = as_user(billing_admin)
    with django_assert_max_num_queries(USAGE_CHART_BUDGET):
        response = client.get(reverse("tenant_usage_daily", args=[tenant.tenant_id]))
    assert len(response.json()["projects"]) == 12


def test_the_usage_pages_charges_chart_data(billing_admin, as_user, tenant, django_assert_max_num_queries):
    _fill_usage(tenant, 12, datetime(2026, 10, 4, tzinfo=UTC))
    client = as_user(billing_admin)
    with django_assert_max_num_queries(CHARGES_CHART_BUDGET):
        response = client.get(reverse("tenant_charges_daily", args=[tenant.tenant_id]), {"month": "2026-10"})
    assert len(response.json()["projects"]) == 12


def test_the_operations_front_page(platform_admin, settings, django_assert_max_num_queries):
    """The admin index counts the fleet in grouped queries: one flavor of a few nodes
    or three flavors of many cost the same."""
    settings.METRICS_URL = ""
    troubled_fleet([FlavorFactory()])
    client = client_for(platform_admin)
    with django_assert_max_num_queries(OPERATIONS_BUDGET) as small:
        response = client.get(reverse("admin:index"))
    assert response.status_code == 200
    troubled_fleet([FlavorFactory(), FlavorFactory()], per_state=4)
    with django_assert_max_num_queries(len(small.captured_queries)):
        response = client.get(reverse("admin:index"))
    assert response.status_code == 200
