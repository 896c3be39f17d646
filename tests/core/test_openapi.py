"""The OpenAPI document at /api/schema/ describes every API endpoint (the contract
says it is the reference), each with the error envelope."""

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


def test_every_api_endpoint_is_in_the_schema_with_the_error_envelope(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    paths = yaml.safe_load(response.content)["paths"]
    served = set(_api_paths(get_resolver().url_patterns)) - {"/api/schema/", "/api/docs/"}
    assert served - {_shape(path) for path in paths} == set()
    long_poll = paths["/api/agent/v1/tasks"]["get"]
    assert long_poll["security"] == [{"nodeCredential": []}]
    assert long_poll["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }


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
