"""Lists answer ``{count, next, previous, results}``, at most 500 a page, in a
number of queries that does not grow with the rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core import audit
from apps.tenancy.models import Membership, Project
from tests.factories import ProjectFactory, UserFactory
from tests.support.members import member

pytestmark = pytest.mark.django_db

# Session, user, memberships (principal), count, page: the budget of GET /api/v1/projects.
PROJECT_LIST_QUERY_BUDGET = 5


def _projects(tenant, count, start=0):
    Project.objects.bulk_create(
        Project(tenant=tenant, project_id=f"p-{i:04d}", name=f"P {i:04d}")
        for i in range(start, start + count)
    )


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/projects",
        "/api/v1/projects/{project.pk}/members",
        "/api/v1/projects/{project.pk}/service-accounts",
        "/api/v1/audit",
    ],
)
def test_lists_have_the_page_envelope(api, project, tenant_admin, path):
    api.force_login(tenant_admin)
    response = api.get(path.format(project=project))
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert isinstance(body["results"], list)
    assert body["count"] == len(body["results"])
    assert body["next"] is None
    assert body["previous"] is None


def test_pages_link_to_each_other(api, tenant, tenant_admin):
    _projects(tenant, 120)
    api.force_login(tenant_admin)
    first = api.get("/api/v1/projects").json()
    assert first["count"] == 120
    assert len(first["results"]) == 50  # PAGE_SIZE
    assert first["previous"] is None
    assert "page=2" in first["next"]
    second = api.get(first["next"]).json()
    assert len(second["results"]) == 50
    assert second["previous"]
    assert "page=3" in second["next"]
    third = api.get(second["next"]).json()
    assert len(third["results"]) == 20
    assert third["next"] is None
    seen = [p["project_id"] for page in (first, second, third) for p in page["results"]]
    assert len(set(seen)) == 120  # a stable order: no row twice, none missed


def test_page_size_is_honoured_and_capped_at_500(api, tenant, tenant_admin):
    _projects(tenant, 510)
    api.force_login(tenant_admin)
    assert len(api.get("/api/v1/projects", {"page_size": 7}).json()["results"]) == 7
    capped = api.get("/api/v1/projects", {"page_size": 100000}).json()
    assert capped["count"] == 510
    assert len(capped["results"]) == 500
    assert "page=2" in capped["next"]


@pytest.mark.parametrize("params", [{"page": 99}, {"page": "x"}])
def test_a_page_past_the_end_is_not_found_in_the_envelope(api, tenant_admin, params):
    api.force_login(tenant_admin)
    response = api.get("/api/v1/projects", params)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_audit_list_is_paginated(api, tenant, tenant_admin):
    for i in range(60):
        audit.record(None, "test.event", target_type="thing", target_id=str(i), tenant_id=tenant.pk)
    api.force_login(tenant_admin)
    body = api.get("/api/v1/audit", {"page_size": 25}).json()
    assert body["count"] == 60
    assert len(body["results"]) == 25
    assert body["next"]


def _count_queries(api, path) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = api.get(path, {"page_size": 500})
    assert response.status_code == 200
    return len(queries)


def test_project_list_queries_do_not_grow_with_projects(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    _projects(tenant, 5)
    few = _count_queries(api, "/api/v1/projects")
    _projects(tenant, 45, start=5)
    many = _count_queries(api, "/api/v1/projects")
    assert many == few <= PROJECT_LIST_QUERY_BUDGET


def test_project_list_stays_in_budget(api, tenant, tenant_admin, django_assert_max_num_queries):
    _projects(tenant, 50)
    api.force_login(tenant_admin)
    with django_assert_max_num_queries(PROJECT_LIST_QUERY_BUDGET):
        response = api.get("/api/v1/projects")
    assert response.status_code == 200
    assert len(response.json()["results"]) == 50


def test_member_list_queries_do_not_grow_with_members(api, project, tenant_admin):
    api.force_login(tenant_admin)
    url = f"/api/v1/projects/{project.pk}/members"
    for _ in range(5):
        member("viewer", project=project)
    few = _count_queries(api, url)
    Membership.objects.bulk_create(
        Membership(user=UserFactory(), tenant=project.tenant, project=project, role="viewer")
        for _ in range(45)
    )
    assert _count_queries(api, url) == few


def test_tenant_detail_queries_do_not_grow_with_projects(api, tenant, tenant_admin):
    api.force_login(tenant_admin)
    ProjectFactory(tenant=tenant)
    few = _count_queries(api, f"/api/tenants/{tenant.tenant_id}")
    _projects(tenant, 40)
    assert _count_queries(api, f"/api/tenants/{tenant.tenant_id}") == few
