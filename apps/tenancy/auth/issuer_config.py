"""``GPUAAS_TRUSTED_ISSUERS``, checked at start-up (settings call ``parse``).

Each entry: ``issuer``, ``jwks_uri`` and ``audience`` (all required), and
optionally ``algorithms``, ``tenants`` (the CCP tenant ids its tokens may act
for), ``roles`` (the platform roles its tokens may grant) and
``platform_roles`` (``true``: it may grant platform-wide roles such as
``platform_integration``; only CCP's own issuer should). The audience is
required: without it any token the issuer signed for any other client (another
application of the same realm) would be accepted here, platform roles included.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from apps.tenancy.roles import PLATFORM_ROLES, Role

VARIABLE = "GPUAAS_TRUSTED_ISSUERS"
_FIELDS = {"issuer", "jwks_uri", "audience", "algorithms", "tenants", "roles", "platform_roles"}


def _fail(message: str):
    raise ImproperlyConfigured(f"{VARIABLE}: {message}")


def _strings(entry: dict, field: str, name: str) -> list[str] | None:
    value = entry.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        _fail(f"{name}: {field!r} must be a non-empty list of strings")
    return value


def parse(items: Any) -> list[dict]:
    """The entries, normalised; ``ImproperlyConfigured`` naming the variable otherwise."""
    if not isinstance(items, list):
        _fail('expected a JSON list of {"issuer", "jwks_uri", "audience"} objects')
    parsed = []
    for item in items:
        if not isinstance(item, dict) or not item.get("issuer") or not item.get("jwks_uri"):
            _fail('expected a JSON list of {"issuer", "jwks_uri", "audience"} objects')
        name = str(item["issuer"])
        unknown = set(item) - _FIELDS
        if unknown:
            _fail(f"{name}: unknown field(s) {sorted(unknown)}")
        if not isinstance(item.get("audience"), str) or not item["audience"].strip():
            _fail(f"{name}: 'audience' is required (the aud value CCP's tokens carry for this platform)")
        platform_roles = item.get("platform_roles", False)
        if not isinstance(platform_roles, bool):
            _fail(f"{name}: 'platform_roles' must be true or false")
        tenants = _strings(item, "tenants", name)
        roles = _strings(item, "roles", name)
        for role in roles or []:
            if role not in Role.values:
                _fail(f"{name}: unknown role {role!r} in 'roles' (roles are {sorted(Role.values)})")
            if role in PLATFORM_ROLES and not platform_roles:
                _fail(f"{name}: 'roles' lists the platform role {role!r}; set 'platform_roles': true")
        if tenants is not None and platform_roles:
            # A platform role acts on every tenant: the tenant limit would not hold.
            _fail(f"{name}: an issuer limited to 'tenants' cannot grant platform roles")
        parsed.append(
            {
                "issuer": name,
                "jwks_uri": str(item["jwks_uri"]),
                "audience": item["audience"].strip(),
                "algorithms": _strings(item, "algorithms", name) or ["RS256"],
                "tenants": tenants,
                "roles": roles,
                "platform_roles": platform_roles,
            }
        )
    return parsed
