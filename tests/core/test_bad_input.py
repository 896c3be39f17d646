"""Bad input gets a 4xx in the error envelope, never a 500: JSON nested 5,000 levels
deep, a body that is not a JSON object, a quota past what the database keeps, a
body larger than the API takes (413 before Django reads it), a method an
endpoint does not serve, and a NUL byte, which PostgreSQL refuses in any text.
tests/core/test_api_fuzz.py tries much more."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from tests.support.instances import launched
from tests.support.members import member
from tests.support.servers import ThreadedUvicorn

pytestmark = pytest.mark.django_db

DEEP = "[" * 5000 + "]" * 5000


def assert_envelope(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["correlation_id"]
    return error


@pytest.mark.parametrize("path", ["/api/v1/auth/token", "/api/agent/v1/enroll"])
def test_json_nested_too_deeply_is_a_400(api, path):
    response = api.post(path, DEEP, content_type="application/json")
    assert_envelope(response, 400, "validation_error")


@pytest.mark.parametrize("body", ["[1, 2]", '"scope"', "3", "null", "true"])
def test_a_body_that_is_not_an_object_is_a_400(api, project, body):
    api.force_login(member("project_admin", project=project))
    for method, path in (
        ("put", f"/api/v1/projects/{project.pk}/proxy"),
        ("post", f"/api/v1/projects/{project.pk}/members"),
    ):
        response = getattr(api, method)(path, body, content_type="application/json")
        error = assert_envelope(response, 400, "validation_error")
        assert "JSON object" in str(error["details"]) or "JSON object" in error["message"]


def test_a_quota_past_what_the_database_keeps_is_a_400(api, ccp_issuer, tenant):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post(
        f"/api/metering/quota/{tenant.tenant_id}",
        {"gpus": 2**63},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    error = assert_envelope(response, 400, "validation_error")
    assert "gpus" in error["details"]


@pytest.mark.django_db(transaction=True)
def test_a_body_larger_than_the_api_takes_is_a_413_before_it_is_read(settings):
    server = ThreadedUvicorn().start()
    try:
        sixty_megabytes = b"{" + b" " * (60 * 1024 * 1024) + b"}"
        declared = httpx.post(f"{server.url}/api/v1/projects", content=sixty_megabytes, timeout=60)
        streamed = httpx.post(
            f"{server.url}/api/v1/projects", content=(b" " * 1024 * 1024 for _ in range(60)), timeout=60
        )
    finally:
        server.stop()
    for response in (declared, streamed):
        error = assert_envelope(response, 413, "payload_too_large")
        assert error["details"] == {"limit": settings.DATA_UPLOAD_MAX_MEMORY_SIZE}


@pytest.mark.parametrize("method", ["post", "delete", "trace"])
def test_the_task_long_poll_answers_only_get(api, method):
    """Any other method used to claim the node's tasks like a GET (found by the fuzz)."""
    response = getattr(api, method)("/api/agent/v1/tasks", HTTP_AUTHORIZATION="Node some-credential")
    assert_envelope(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET"


NUL_IN_THE_ADDRESS = [
    "/api/tenants/%00",
    "/api/metering/quota/acme%00",
    "/api/metrics/gpu/%00",
    "/api/metrics/gpu/acme?project_id=%00",
    "/api/metering/usage?tenant_id=%00&from=2024-01-01&to=2024-02-01",
    "/api/metering/export/csv?tenant_id=%00&period=2024-01",
    "/api/alerts?tenant_id=%00",
    "/api/v1/catalog/apps/jupyterlab/versions/%00",
]


@pytest.mark.parametrize("path", NUL_IN_THE_ADDRESS)
def test_a_nul_byte_in_an_api_address_is_a_400(api, tenant_admin, path):
    """It reached a lookup by CCP id, slug or version, which PostgreSQL refused with a 500."""
    api.force_login(tenant_admin)
    assert_envelope(api.get(path), 400, "validation_error")


@pytest.mark.parametrize("path", ["/tenants/%00/usage/", "/tenants/acme%00/quota/gauges/"])
def test_a_nul_byte_in_a_page_address_is_a_400(tenant_admin, path):
    client = Client(raise_request_exception=False)
    client.force_login(tenant_admin)
    response = client.get(path)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("endpoint", ["web\x00", "", "  ", None, 5, 1.5, True, ["web"]])
def test_a_ui_session_endpoint_that_is_not_a_name_is_a_400(
    api, owner, project, active_allocation, jupyterlab, endpoint
):
    # Blank or null is not "the first endpoint" (leaving it out is), and a number is not a
    # name; a NUL byte would reach PostgreSQL in the route's lookup.
    instance = launched(owner, project, active_allocation)
    api.force_login(owner)
    response = api.post(f"/api/v1/workloads/{instance.pk}/ui/session", {"endpoint": endpoint}, format="json")
    error = assert_envelope(response, 400, "validation_error")
    assert list(error["details"]) == ["endpoint"]
