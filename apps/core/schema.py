"""drf-spectacular hooks: every operation documents the error envelope and carries the
tag of its group, node agents' endpoints have a schema of their own, and the API's
authentication classes map to OpenAPI security schemes."""

from __future__ import annotations

import re

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenancy.auth.authentication.BearerTokenAuthentication"
    name = "bearer"  # the scheme SPECTACULAR_SETTINGS["APPEND_COMPONENTS"] declares

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    target_class = "apps.allocations.api.agent_auth.NodeCredentialAuthentication"
    name = "nodeCredential"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Node agents: `Authorization: Node <node credential>` (after enrollment).",
        }


class PortalSessionScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenancy.auth.authentication.PortalSessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": settings.SESSION_COOKIE_NAME,
            "description": "The portal's session (browser only; unsafe methods need the CSRF token).",
        }


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "correlation_id", "details"],
            "properties": {
                "code": {"type": "string", "example": "validation_error"},
                "message": {"type": "string"},
                "correlation_id": {"type": "string"},
                "details": {"type": "object", "additionalProperties": True},
            },
        }
    },
}

ERROR_REF = {"$ref": "#/components/schemas/Error"}


def error_response(description: str) -> OpenApiResponse:
    """A status only some operations answer (422, 503), documented with ``extend_schema``
    in the envelope that ``add_error_responses`` declares."""
    return OpenApiResponse(response=ERROR_REF, description=description)


QUOTA_EXCEEDED = error_response(
    "The request would pass the tenant's quota (`quota_exceeded`; details: resource, limit, used, requested)."
)
UNAVAILABLE = error_response(
    "A backend cannot serve it now (`unavailable`); retry after `Retry-After` seconds."
)

_COMMON = {
    "400": "Validation error (`validation_error`, details map field to messages).",
    "401": "Missing, malformed, expired, badly signed or untrusted token (`unauthenticated`).",
    "403": "In scope but the role does not allow it (`forbidden`).",
    "404": "Not found or outside the caller's scope (`not_found`).",
    "429": "Rate limited (`rate_limited`), see `Retry-After`.",
    "500": "Internal error (`internal_error`).",
}
_WRITE = {
    "409": "Conflict (`conflict`, `idempotency_conflict` or `invalid_state`).",
}


def add_error_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = ERROR_REF
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            extra = dict(_COMMON)
            if method != "get":
                extra.update(_WRITE)
                params = operation.setdefault("parameters", [])
                if method == "post" and not any(p.get("name") == "Idempotency-Key" for p in params):
                    params.append(
                        {
                            "in": "header",
                            "name": "Idempotency-Key",
                            "required": False,
                            "schema": {"type": "string", "maxLength": 255},
                            "description": "Replays the first response for the same key and body.",
                        }
                    )
            for code, description in extra.items():
                responses.setdefault(
                    code,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": ref}},
                    },
                )
    return result


AGENT_PREFIX = "/api/agent/"

# An operation takes the tag of the first pattern its path matches (paths as the schema
# spells them); SPECTACULAR_SETTINGS["TAGS"] lists the groups.
_TAG_RULES = [
    (r"/api/v1/projects/\{[^}]+\}/allocations/\{[^}]+\}/(access|authorized-keys)", "access"),
    (r"/api/v1/projects/\{[^}]+\}/(access-credentials|secrets)", "access"),
    (r"/api/v1/profile/", "access"),
    (r"/api/v1/projects/\{[^}]+\}/allocations", "allocations"),
    (r"/api/(baremetal-manager|network-manager|storage)/", "allocations"),
    (r"/api/v1/catalog/", "catalog"),
    (r"/api/v1/projects/\{[^}]+\}/(app-instances|proxy)", "instances"),
    (r"/api/v1/(operations|workloads)/", "instances"),
    (r"/api/metering/", "metering"),
    (r"/api/(alerts|metrics)", "monitoring"),
    (r"/api/(tenants|v1/tenants|v1/projects|v1/auth|v1/audit)|/\.well-known/", "tenancy"),
]


def tag_for(path: str) -> str | None:
    return next((tag for pattern, tag in _TAG_RULES if re.match(pattern, path)), None)


def tag_operations(result, generator, request, public):
    """Each operation in its group; one no rule names keeps drf-spectacular's tag, which
    the schema test catches."""
    for path, path_item in result.get("paths", {}).items():
        tag = tag_for(path)
        for operation in path_item.values():
            if tag and isinstance(operation, dict) and "tags" in operation:
                operation["tags"] = [tag]
    return result


def without_agent_endpoints(endpoints):
    """The public document leaves out node agents' endpoints: they have their own
    (``/api/agent/schema/``), for agent builders, not for API clients."""
    return [endpoint for endpoint in endpoints if not endpoint[0].startswith(AGENT_PREFIX)]


def only_agent_endpoints(endpoints):
    return [endpoint for endpoint in endpoints if endpoint[0].startswith(AGENT_PREFIX)]


def tag_agent_operations(result, generator, request, public):
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if isinstance(operation, dict) and "tags" in operation:
                operation["tags"] = ["agent"]
    return result
