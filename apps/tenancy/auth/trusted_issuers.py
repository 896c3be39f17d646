"""Verification keys of the external issuers in ``GPUAAS_TRUSTED_ISSUERS``.

Key sets are refreshed off the request path by a periodic task and kept in the
shared cache; each process also keeps them in memory for a short time. A token
naming an unknown ``kid`` triggers at most one refetch per issuer per minute
across all replicas, so a flood of made-up kids cannot hammer the IdP. A key
the IdP stops publishing stops verifying at the next refresh.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.core.cache import cache
from jwt import PyJWK, PyJWTError

from apps.core import correlation, outbound
from apps.tenancy.roles import PLATFORM_ROLES

logger = logging.getLogger(__name__)

REFETCH_GAP_SECONDS = 60
SHARED_TTL_SECONDS = 3600
LOCAL_TTL_SECONDS = 30
FETCH_TIMEOUT_SECONDS = 5.0
_local: dict[str, tuple[float, dict]] = {}


@dataclass(frozen=True)
class Issuer:
    issuer: str
    jwks_uri: str
    audience: str
    algorithms: tuple[str, ...]
    tenants: frozenset[str] | None = None  # CCP tenant ids its tokens may act for; None: any
    roles: frozenset[str] | None = None  # platform roles its tokens may grant; None: any but platform roles
    platform_roles: bool = False  # may grant platform-wide roles (CCP's own issuer only)

    def may_grant(self, role: str) -> bool:
        if role in PLATFORM_ROLES and not self.platform_roles:
            return False
        return self.roles is None or role in self.roles

    def may_act_for(self, tenant_id: str) -> bool:
        return self.tenants is None or tenant_id in self.tenants


def configured() -> dict[str, Issuer]:
    """The issuers of ``settings.TRUSTED_ISSUERS`` (checked at start-up by ``issuer_config``)."""
    return {
        item["issuer"]: Issuer(
            issuer=item["issuer"],
            jwks_uri=item["jwks_uri"],
            audience=item["audience"],
            algorithms=tuple(item.get("algorithms") or ["RS256"]),
            tenants=frozenset(item["tenants"]) if item.get("tenants") is not None else None,
            roles=frozenset(item["roles"]) if item.get("roles") is not None else None,
            platform_roles=item.get("platform_roles") is True,
        )
        for item in settings.TRUSTED_ISSUERS
    }


def _cache_key(issuer: str) -> str:
    return f"jwks:{issuer}"


def fetch(issuer: Issuer) -> dict:
    """Fetch and publish the issuer's key set; returns ``{kid: jwk}``."""
    response = httpx.get(
        issuer.jwks_uri,
        timeout=FETCH_TIMEOUT_SECONDS,
        headers=correlation.outbound_headers(),
        verify=outbound.tls(),
    )
    response.raise_for_status()
    keys = {key["kid"]: key for key in response.json().get("keys", []) if key.get("kid")}
    cache.set(_cache_key(issuer.issuer), json.dumps(keys), timeout=SHARED_TTL_SECONDS)
    _local[issuer.issuer] = (time.monotonic(), keys)
    return keys


def refresh_all() -> None:
    for issuer in configured().values():
        try:
            fetch(issuer)
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning("JWKS refresh of %s failed: %s", issuer.issuer, exc.__class__.__name__)


def _keys(issuer: Issuer) -> dict:
    cached = _local.get(issuer.issuer)
    if cached and time.monotonic() - cached[0] < LOCAL_TTL_SECONDS:
        return cached[1]
    shared = _shared_keys(issuer)
    if shared is not None:
        return shared
    return _refetch(issuer) or _wait_for_shared(issuer) or {}


def _wait_for_shared(issuer: Issuer, timeout: float = FETCH_TIMEOUT_SECONDS) -> dict | None:
    """Cold cache, and another request is fetching: wait for its result instead of failing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        keys = _shared_keys(issuer)
        if keys is not None:
            return keys
    return None


def _shared_keys(issuer: Issuer) -> dict | None:
    shared = cache.get(_cache_key(issuer.issuer))
    if shared is None:
        return None
    keys = json.loads(shared)
    _local[issuer.issuer] = (time.monotonic(), keys)
    return keys


def _refetch(issuer: Issuer) -> dict | None:
    if not cache.add(f"jwks-refetch:{issuer.issuer}", 1, timeout=REFETCH_GAP_SECONDS):
        return None
    try:
        return fetch(issuer)
    except (httpx.HTTPError, ValueError) as exc:
        logger.warning("JWKS fetch of %s failed: %s", issuer.issuer, exc.__class__.__name__)
        return None


def signing_key(issuer: Issuer, kid: str, algorithm: str) -> PyJWK | None:
    keys = _keys(issuer)
    if kid not in keys:
        # Another process (a replica, the periodic refresh) may have fetched it already.
        keys = _shared_keys(issuer) or keys
    if kid not in keys:
        keys = _refetch(issuer) or keys
    jwk = keys.get(kid)
    if jwk is None:
        return None
    try:
        return PyJWK(jwk, algorithm=algorithm)
    except PyJWTError as exc:  # e.g. the kid of an EC key in an RS256 token
        logger.warning("JWK %s of %s unusable for %s: %s", kid, issuer.issuer, algorithm, exc)
        return None


def forget_cached_keys() -> None:
    _local.clear()
