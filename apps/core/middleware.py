from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import DisallowedHost, SuspiciousOperation
from django.http import Http404

from apps.core import audit, correlation, error_pages, outages
from apps.core.errors import error_json, is_api_path

logger = logging.getLogger("gpuaas.request")
ADMIN_PREFIX = "/admin/"

# Pages come from our own origin only, and their scripts only from its static files:
# not 'self', which would trust the apps served under /w/ on this origin (path-prefix
# routes). Views that need more (Swagger UI's inline bootstrap) set ``response.csp``.
_CSP = (
    "default-src 'self'; script-src {scripts}; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; frame-src 'self'; frame-ancestors 'none'; "
    "object-src 'none'; base-uri 'self'; form-action 'self'"
)


def default_csp(request) -> str:
    try:
        origin = f"{request.scheme}://{request.get_host()}"
    except DisallowedHost:
        return _CSP.format(scripts="'none'")  # an error page for a host we do not serve runs no script
    scripts = f"{origin}{settings.STATIC_URL}"
    if request.path.startswith(ADMIN_PREFIX):
        # The admin's list script reads its strings ("1 of 20 selected") from this view.
        scripts += f" {origin}{ADMIN_PREFIX}jsi18n/"
    return _CSP.format(scripts=scripts)


class CorrelationIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        value = correlation.accept(request.headers.get(correlation.HEADER))
        token = correlation.set(value)
        ip_token = audit.bind_source_ip(request.META.get("REMOTE_ADDR"))
        request.correlation_id = value
        try:
            response = self.get_response(request)
        finally:
            correlation.reset(token)
            audit.unbind_source_ip(ip_token)
        response[correlation.HEADER] = value
        return response


class SecurityHeadersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", getattr(response, "csp", None) or default_csp(request))
        response.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
        if is_api_path(request.path):
            response.setdefault("Cache-Control", "no-store")
        return response


class NulByteMiddleware:
    """A NUL byte in the path or the query string is a 400 before any view reads it.

    No id, slug, name or filter of ours holds one, and PostgreSQL refuses it in any
    text it compares: each lookup by a path part or a query parameter would answer 500."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any(
            "\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists()
        ):
            if is_api_path(request.path):
                return error_json(400, "validation_error", "The address holds a NUL byte.")
            return error_pages.bad_request(request, SuspiciousOperation("a NUL byte in the address"))
        return self.get_response(request)


class ApiErrorMiddleware:
    """Envelope for errors that never reach DRF on API paths (routing 404s, crashes),
    and the 503 of a dependency that is down on every path."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code == 404
            and is_api_path(request.path)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return error_json(404, "not_found", "No such endpoint or resource.")
        return response

    def process_exception(self, request, exception):
        outage = outages.answer(request, exception)
        if outage is not None or not is_api_path(request.path):
            return outage
        if isinstance(exception, Http404):
            return error_json(404, "not_found", "Not found.")
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return error_json(500, "internal_error", "An internal error occurred; quote the correlation id.")
