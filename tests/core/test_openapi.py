"""The OpenAPI document at /api/schema/ describes every API endpoint (the contract
says it is the reference), each with the error envelope, grouped by tag; node agents'
endpoints are in a document of their own, /api/agent/schema/."""

from __future__ import annotations

import re

import pytest
import yaml
from django.urls import URLPattern, URLResolver, get_resolver

pytestmark = pytest.mark.django_db


def _api_paths(patterns, prefix: str = ""):
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _api_paths(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and route.startswith("api/"):
            yield _shape("/" + route)


def _shape(path: str) -> str:
    """A path with its parameters unnamed: the schema names ``<pk>`` ``{id}``."""
    return re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path)


GROUPS = ["tenancy", "allocations", "catalog", "instances", "metering", "monitoring", "access"]
SCHEMAS = {"/api/schema/", "/api/docs/", "/api/agent/schema/"}


def _served(agent: bool) -> set[str]:
    return {
        path
        for path in set(_api_paths(get_resolver().url_patterns)) - SCHEMAS
        if path.startswith("/api/agent/") == agent
    }


def _operations(paths: dict):
    for path, item in paths.items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield path, method, operation


def test_every_api_endpoint_is_in_the_schema_with_the_error_envelope(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    paths = yaml.safe_load(response.content)["paths"]
    assert _served(agent=False) - {_shape(path) for path in paths} == set()
    assert not [path for path in paths if path.startswith("/api/agent/")]


def test_node_agent_endpoints_are_in_their_own_schema_with_the_error_envelope(client):
    response = client.get("/api/agent/schema/")
    assert response.status_code == 200
    paths = yaml.safe_load(response.content)["paths"]
    assert {_shape(path) for path in paths} == _served(agent=True)
    long_poll = paths["/api/agent/v1/tasks"]["get"]
    assert long_poll["security"] == [{"nodeCredential": []}]
    assert long_poll["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }


def test_operations_are_grouped_by_tag_in_the_documented_order(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert [tag["name"] for tag in schema["tags"]] == GROUPS
    assert all(tag["description"] for tag in schema["tags"])
    tags = {(path, method): operation["tags"] for path, method, operation in _operations(schema["paths"])}
    assert {tuple(tag) for tag in tags.values()} == {(group,) for group in GROUPS}
    # A few a reader would look for in a group of their own.
    assert tags["/api/baremetal-manager/allocate", "post"] == ["allocations"]
    assert tags["/api/v1/projects/{project_pk}/app-instances", "post"] == ["instances"]
    assert tags["/api/v1/projects/{project_pk}/allocations/{id}/authorized-keys", "post"] == ["access"]
    assert tags["/api/metering/export/csv", "get"] == ["metering"]
    assert tags["/api/alerts", "get"] == ["monitoring"]
    assert tags["/api/v1/catalog/apps", "get"] == ["catalog"]
    assert tags["/api/tenants", "post"] == ["tenancy"]


def test_statuses_some_operations_answer_are_documented_in_the_envelope(client):
    """Found by the fuzz: each of these answered a status or body the schema did not describe."""
    schema = yaml.safe_load(client.get("/api/schema/").content)
    paths, error = schema["paths"], {"$ref": "#/components/schemas/Error"}

    def documented(path, method, status):
        return paths[path][method]["responses"][status]["content"]["application/json"]["schema"]

    assert documented("/api/baremetal-manager/allocate", "post", "422") == error
    assert documented("/api/v1/projects/{project_pk}/allocations", "post", "422") == error
    assert documented("/api/network-manager/vpc", "post", "503") == error
    assert documented("/api/storage/tenant", "post", "503") == error
    assert "200" in paths["/api/v1/projects/{project_pk}/proxy"]["get"]["responses"]
    audit_event = schema["components"]["schemas"]["AuditEvent"]["properties"]
    assert audit_event["tenant"]["nullable"]
    assert audit_event["project"]["nullable"]
