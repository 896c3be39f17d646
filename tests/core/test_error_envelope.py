import pytest

pytestmark = pytest.mark.django_db


def assert_envelope(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["correlation_id"] == response["X-Correlation-ID"]
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


def test_unknown_api_path_answers_not_found_envelope(api):
    assert_envelope(api.get("/api/v1/no-such-thing"), 404, "not_found")


def test_missing_token_answers_unauthenticated_envelope(api):
    response = api.get("/api/v1/projects")
    assert_envelope(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_validation_errors_map_fields_to_messages(api, ccp_issuer):
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post("/api/tenants", {"name": "x"}, format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    error = assert_envelope(response, 400, "validation_error")
    assert "tenant_id" in error["details"]
    assert "realm_name" in error["details"]


def test_unhandled_exception_answers_internal_error_without_trace(api, monkeypatch, ccp_issuer):
    from apps.tenancy import services

    def explode(*args, **kwargs):
        raise RuntimeError("secret-table-name SELECT * FROM x")

    monkeypatch.setattr(services, "onboard_tenant", explode)
    api.raise_request_exception = False
    token = ccp_issuer.token({"roles": ["GPUaaS Platform Integration"]})
    response = api.post(
        "/api/tenants",
        {"tenant_id": "t1", "name": "T", "realm_name": "t1"},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert_envelope(response, 500, "internal_error")
    assert b"secret-table-name" not in response.content
    assert b"Traceback" not in response.content
