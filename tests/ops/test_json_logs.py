"""Log lines are JSON objects carrying the correlation id of the request that
wrote them, through the handler the settings configure."""

from __future__ import annotations

import io
import json
import logging

import pytest


@pytest.fixture
def log_lines():
    """The formatted output of the configured handler (a file or the console)."""
    handlers = [h for h in logging.getLogger().handlers if h.get_name() == "json"]
    assert handlers, "LOGGING must configure a 'json' handler on the root logger"
    handler = handlers[0]
    stream = io.StringIO()
    previous = handler.setStream(stream)
    lines: list[dict] = []

    def read() -> list[dict]:
        lines[:] = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
        return lines

    yield read
    handler.setStream(previous)


@pytest.mark.django_db
def test_rejected_token_logs_json_with_the_request_correlation_id(api, log_lines):
    response = api.get(
        "/api/v1/projects", HTTP_AUTHORIZATION="Bearer not-a-jwt", HTTP_X_CORRELATION_ID="ops-log-test-0001"
    )
    assert response.status_code == 401
    lines = log_lines()  # every line parses as JSON, or json.loads raised
    rejected = [line for line in lines if line["logger"] == "gpuaas.auth"]
    assert rejected, lines
    assert rejected[0]["correlation_id"] == "ops-log-test-0001"
    assert rejected[0]["level"] == "WARNING"
    assert "bearer token rejected" in rejected[0]["message"]
    assert "not-a-jwt" not in json.dumps(lines)  # tokens never reach the log
    assert {"time", "level", "logger", "message", "correlation_id"} <= set(rejected[0])


@pytest.mark.django_db
def test_access_log_line_per_request_carries_generated_correlation_id(api, log_lines):
    response = api.get("/api/v1/projects?secret=hunter2")
    generated = response["X-Correlation-ID"]
    access = [line for line in log_lines() if line["logger"] == "gpuaas.access"]
    assert len(access) == 1
    line = access[0]
    assert line["correlation_id"] == generated
    assert (line["method"], line["path"], line["status"]) == ("GET", "/api/v1/projects", 401)
    assert line["duration_ms"] >= 0
    assert "hunter2" not in json.dumps(line)  # query strings are not logged


def test_lines_outside_a_request_have_a_placeholder_correlation_id(log_lines):
    logging.getLogger("gpuaas.test").warning("outside any request")
    (line,) = [line for line in log_lines() if line["logger"] == "gpuaas.test"]
    assert line["correlation_id"] == "-"
    assert line["message"] == "outside any request"


@pytest.mark.django_db
def test_django_request_log_keeps_the_correlation_id_and_drops_the_query_string(api, log_lines):
    # django.request logs 4xx/5xx after the middleware has left the request's context.
    response = api.get("/api/v1/projects?ticket=hunter2", HTTP_X_CORRELATION_ID="ops-log-test-0002")
    assert response.status_code == 401
    (line,) = [line for line in log_lines() if line["logger"] == "django.request"]
    assert line["correlation_id"] == "ops-log-test-0002"
    assert (line["method"], line["path"], line["status_code"]) == ("GET", "/api/v1/projects", 401)
    assert "hunter2" not in json.dumps(line)
