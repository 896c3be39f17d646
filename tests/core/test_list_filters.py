"""The list filters of the API (django-filter FilterSets): a value they cannot take is a
400 in the error envelope naming the parameter, never a 500 nor an unfiltered list, and
the OpenAPI document lists each filter with the values it takes."""

from __future__ import annotations

import pytest
import yaml

from tests.support.members import member

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "query", "param"),
    [
        ("/api/v1/projects/{project}/allocations", {"state": "SLEEPING"}, "state"),
        ("/api/v1/projects/{project}/app-instances", {"state": "sleeping"}, "state"),
        ("/api/v1/audit", {"outcome": "maybe"}, "outcome"),
        ("/api/v1/audit", {"project": "not-a-uuid"}, "project"),
        ("/api/v1/audit", {"from": "yesterday"}, "from"),
        ("/api/v1/audit", {"to": "2026-13-45T00:00:00Z"}, "to"),
    ],
)
def test_an_invalid_filter_value_is_a_400_in_the_envelope(api, project, path, query, param):
    api.force_login(member("tenant_admin", tenant=project.tenant))

    response = api.get(path.format(project=project.pk), query)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["correlation_id"]
    assert list(error["details"]) == [param]


def test_a_state_filter_takes_its_value_in_any_letter_case(api, project):
    api.force_login(member("tenant_admin", tenant=project.tenant))
    allocations = f"/api/v1/projects/{project.pk}/allocations"
    instances = f"/api/v1/projects/{project.pk}/app-instances"

    for path, value in ((allocations, "active"), (allocations, "ACTIVE"), (instances, "Running")):
        assert api.get(path, {"state": value}).status_code == 200


def test_the_schema_lists_the_filters_with_their_values(client):
    paths = yaml.safe_load(client.get("/api/schema/").content)["paths"]

    def params(path):
        return {p["name"]: p["schema"] for p in paths[path]["get"]["parameters"] if p["in"] == "query"}

    audit = params("/api/v1/audit")
    assert {"action", "outcome", "actor", "project", "from", "to"} <= set(audit)
    assert audit["from"]["format"] == "date-time"
    assert audit["project"]["format"] == "uuid"
    assert set(params("/api/v1/projects/{project_pk}/allocations")["state"]["enum"]) >= {"PENDING", "ACTIVE"}
    assert "running" in params("/api/v1/projects/{project_pk}/app-instances")["state"]["enum"]


def test_a_portal_list_given_a_value_no_filter_takes_shows_everything(
    client, project, other_tenant_project, platform_admin
):
    """A hand-edited link: the page shows the whole list with no filter chosen (the same
    FilterSets as the API's filter the portal's lists)."""
    client.force_login(platform_admin)

    response = client.get("/projects/", {"tenant": "not-a-uuid"})

    assert response.status_code == 200
    table = response.content.decode().split('id="project-table"', 1)[1]
    assert project.name in table
    assert other_tenant_project.name in table
    for page in ("allocations", "instances"):
        assert client.get(f"/projects/{project.pk}/{page}/", {"state": "sleeping"}).status_code == 200
