"""The error envelope of CONTRACT.md and the exceptions services raise.

Services raise ``ApiError`` subclasses; DRF views turn them (and DRF's own
exceptions) into ``{"error": {"code", "message", "correlation_id", "details"}}``
through ``api_exception_handler``. ``ApiErrorMiddleware`` covers what never
reaches DRF: routing 404s and unhandled exceptions on API paths.
"""

from __future__ import annotations

import logging
import math

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response

from apps.core import correlation

logger = logging.getLogger(__name__)

API_PREFIXES = ("/api/", "/.well-known/")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


class ApiError(Exception):
    status_code = status.HTTP_400_BAD_REQUEST
    code = "validation_error"
    default_message = "The request is not valid."

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ):
        self.message = message or self.default_message
        self.details = details or {}
        if code:
            self.code = code
        self.retry_after = retry_after
        super().__init__(self.message)


class ValidationFailed(ApiError):
    pass


class Unauthenticated(ApiError):
    status_code = 401
    code = "unauthenticated"
    default_message = "Authentication credentials are missing or not valid."


class Forbidden(ApiError):
    status_code = 403
    code = "forbidden"
    default_message = "You do not have permission to perform this action."


class NotFound(ApiError):
    status_code = 404
    code = "not_found"
    default_message = "Not found."


class Conflict(ApiError):
    status_code = 409
    code = "conflict"
    default_message = "The request conflicts with the current state of the resource."


class InvalidState(Conflict):
    code = "invalid_state"


class QuotaExceeded(ApiError):
    status_code = 422
    code = "quota_exceeded"
    default_message = "The request would exceed the tenant's quota."


class RateLimited(ApiError):
    status_code = 429
    code = "rate_limited"
    default_message = "Too many requests."


class Unavailable(ApiError):
    status_code = 503
    code = "unavailable"
    default_message = "The service is temporarily unavailable."


def envelope(code: str, message: str, details: dict | None = None) -> dict:
    return {
        "error": {
            "code": code,
            "message": message,
            "correlation_id": correlation.get(),
            "details": details or {},
        }
    }


def error_json(
    status_code: int, code: str, message: str, details: dict | None = None, retry_after: int | None = None
) -> JsonResponse:
    response = JsonResponse(envelope(code, message, details), status=status_code)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _flatten(detail) -> dict | list | str:
    if isinstance(detail, dict):
        return {key: _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_flatten(item) for item in detail]
    return str(detail)


# The code of each status (CONTRACT.md "Conventions for every API response"), for
# answers that do not start as an ``ApiError``: DRF's own exceptions and the platform
# proxy's pages (``apps.proxy.dataplane.pages``, which also answer for nginx's plane).
STATUS_CODES = {
    400: "validation_error",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "quota_exceeded",
    429: "rate_limited",
    500: "internal_error",
    502: "bad_gateway",
    503: "unavailable",
    504: "gateway_timeout",
}


def code_for(status_code: int) -> str:
    return STATUS_CODES.get(status_code, "error")


def api_exception_handler(exc, context) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: every error leaves in the contract's envelope."""
    headers: dict[str, str] = {}
    if isinstance(exc, ApiError):
        status_code, code, message, details = exc.status_code, exc.code, exc.message, exc.details
        if exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, Http404):
        status_code, code, message, details = 404, "not_found", "Not found.", {}
    elif isinstance(exc, PermissionDenied):
        status_code, code, message, details = 403, "forbidden", Forbidden.default_message, {}
    elif isinstance(exc, drf_exceptions.ValidationError):
        detail = _flatten(exc.detail)
        if not isinstance(detail, dict):
            detail = {"non_field_errors": detail if isinstance(detail, list) else [detail]}
        status_code, code, message, details = 400, "validation_error", "The request is not valid.", detail
    elif isinstance(exc, drf_exceptions.Throttled):
        wait = math.ceil(exc.wait or 1)
        headers["Retry-After"] = str(wait)
        status_code, code, message, details = (
            429,
            "rate_limited",
            f"Too many requests; retry in {wait} s.",
            {},
        )
    elif isinstance(exc, (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)):
        status_code, code, message, details = 401, "unauthenticated", str(exc.detail), {}
    elif isinstance(exc, drf_exceptions.APIException):
        status_code = exc.status_code
        code = code_for(status_code)
        message, details = str(exc.detail) if not isinstance(exc.detail, (dict, list)) else "Error.", {}
        if isinstance(exc.detail, (dict, list)):
            details = {"detail": _flatten(exc.detail)}
    else:
        return None  # unhandled: ApiErrorMiddleware logs it and answers 500
    if status_code == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="gpuaas"'
    return Response(envelope(code, message, details), status=status_code, headers=headers)
