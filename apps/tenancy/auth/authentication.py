"""DRF authentication: bearer JWTs (platform-issued or from a trusted issuer)
and the portal's session. Both put a ``Principal`` in ``request.auth``."""

from __future__ import annotations

import logging

import jwt
from django.conf import settings
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import AuthenticationFailed

from apps.tenancy import principal as principals
from apps.tenancy.auth import platform_tokens, trusted_issuers
from apps.tenancy.models import Project, ServiceAccount, Tenant
from apps.tenancy.principal import Grant, Principal
from apps.tenancy.roles import PLATFORM_ROLES, TENANT_ONLY_ROLES, TENANT_WIDE_CCP_ROLES, ccp_role_map

logger = logging.getLogger("gpuaas.auth")


class MachineUser:
    """``request.user`` for callers that are not portal users (service accounts, CCP)."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, name: str):
        self.username = name

    def get_username(self) -> str:
        return self.username

    def __str__(self):
        return self.username


def _reject(reason: str, log_reason: str | None = None):
    logger.warning("bearer token rejected: %s", log_reason or reason)
    raise AuthenticationFailed(reason)


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate_header(self, request):
        return f'{self.keyword} realm="gpuaas"'

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            _reject("Malformed Authorization header; expected 'Bearer <token>'.")
        try:
            header_fields = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            _reject("Malformed token.")
        issuer = unverified.get("iss")
        if issuer == settings.ISSUER:
            principal = self._platform_principal(token, header_fields)
        else:
            principal = self._federated_principal(request, token, header_fields, issuer)
        return MachineUser(principal.name), principal

    @staticmethod
    def _verify(token: str, key, algorithm: str, issuer: str, audience: str) -> dict:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                issuer=issuer,
                audience=audience,
                leeway=settings.JWT_LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "sub", "aud"], "verify_aud": True},
            )
        except jwt.ExpiredSignatureError:
            _reject("Token has expired.")
        except jwt.ImmatureSignatureError:
            _reject("Token is not valid yet.")
        except jwt.InvalidAudienceError:
            _reject("Token audience is not accepted.")
        except jwt.PyJWTError as exc:
            _reject("Token is not valid.", f"{exc.__class__.__name__}: {exc}")

    def _platform_principal(self, token: str, header_fields: dict) -> Principal:
        if header_fields.get("alg") != platform_tokens.ALGORITHM:
            _reject("Token algorithm is not accepted.")
        key = platform_tokens.public_key(header_fields.get("kid", ""))
        if key is None:
            _reject("Token signing key is unknown.")
        claims = self._verify(token, key, platform_tokens.ALGORITHM, settings.ISSUER, settings.ISSUER)
        account = (
            ServiceAccount.objects.filter(pk=claims.get("sa"), revoked_at__isnull=True)
            .only("id", "name", "role", "limit", "tenant_id", "project_id")
            .first()
        )
        if account is None:
            _reject("Service account is revoked or unknown.")
        return principals.for_service_account(account, claims)

    def _federated_principal(self, request, token: str, header_fields: dict, issuer_name) -> Principal:
        issuer = trusted_issuers.configured().get(issuer_name) if isinstance(issuer_name, str) else None
        if issuer is None:
            _reject("Token issuer is not trusted.", f"untrusted issuer {issuer_name!r}")
        algorithm = header_fields.get("alg")
        if algorithm not in issuer.algorithms:
            _reject("Token algorithm is not accepted.", f"alg {algorithm!r} from {issuer.issuer}")
        key = trusted_issuers.signing_key(issuer, header_fields.get("kid", ""), algorithm)
        if key is None:
            _reject("Token signing key is unknown.")
        claims = self._verify(token, key, algorithm, issuer.issuer, issuer.audience)
        return federated_principal(request, issuer, claims)


def federated_principal(request, issuer: trusted_issuers.Issuer, claims: dict) -> Principal:
    """Map a CCP token's claims to grants: ``domain_id`` picks the tenant,
    ``project_id`` the project, ``roles`` the platform roles, each within what the
    issuer is trusted for (its ``tenants``, ``roles`` and ``platform_roles``)."""
    domain_id = claims.get("domain_id")
    tenant = project = None
    if domain_id:
        tenant, project = _claimed_scope(request, issuer, domain_id, claims.get("project_id"))
        # A realm's token naming another tenant is refused, even from an issuer trusted for both.
        if tenant is not None and not tenant.admits_realm(claims.get("realm_name")):
            _reject("Token realm is not the tenant's.", f"realm_name for tenant {tenant.tenant_id!r}")
    grants = _granted(issuer, claims.get("roles") or [], tenant, project)
    subject = str(claims.get("sub"))
    return Principal(
        kind="federated",
        key=f"jwt:{issuer.issuer}:{subject}",
        name=claims.get("preferred_username")
        or f"{claims.get('azp') or claims.get('client_id') or 'ccp'}:{subject}",
        grants=grants,
        claims=claims,
    )


def _claimed_scope(request, issuer: trusted_issuers.Issuer, domain_id, project_claim):
    """The tenant ``domain_id`` names and, when ``project_claim`` names one of its
    projects, that project; refused outside the tenants the issuer is trusted for."""
    if not issuer.may_act_for(str(domain_id)):
        _reject("Token issuer is not trusted for this tenant.", f"{issuer.issuer} for {domain_id!r}")
    tenant = project = None
    if project_claim:
        project = (
            Project.objects.select_related("tenant")
            .filter(tenant__tenant_id=str(domain_id), project_id=str(project_claim))
            .first()
        )
        tenant = project.tenant if project else None
    if tenant is None:
        tenant = Tenant.objects.filter(tenant_id=str(domain_id)).first()
    if tenant is None and not _allows_unknown_tenant(request):
        _reject("Token names an unknown tenant (domain_id).", f"unknown domain_id {domain_id!r}")
    return tenant, project


def _granted(issuer: trusted_issuers.Issuer, roles, tenant, project) -> list[Grant]:
    """The grants of the CCP ``roles`` claim that the issuer may give, each scoped to
    the platform, the tenant or the project as its role is."""
    role_map = ccp_role_map()
    grants = []
    for role_name in roles if isinstance(roles, list) else []:
        if not isinstance(role_name, str):
            continue  # a list or object in the claim must not break the lookup
        mapped = role_map.get(role_name)
        if mapped is None:
            continue
        role, limit = mapped
        if not issuer.may_grant(role):
            logger.warning("issuer %s may not grant %s; role %r ignored", issuer.issuer, role, role_name)
            continue
        if role in PLATFORM_ROLES:
            grants.append(Grant(role, None, None, limit))
        elif tenant is None:
            continue
        elif role_name in TENANT_WIDE_CCP_ROLES or role in TENANT_ONLY_ROLES:
            grants.append(Grant(role, tenant.id, None, limit))
        elif project is not None:
            grants.append(Grant(role, tenant.id, project.id, limit))
    return grants


def _allows_unknown_tenant(request) -> bool:
    view = (getattr(request, "parser_context", None) or {}).get("view")
    return bool(getattr(view, "allow_unknown_tenant", False))


class PortalSessionAuthentication(SessionAuthentication):
    """The portal's Django session (CSRF enforced), for the pages' own API calls."""

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        user, _ = result
        return user, principals.for_user(user)
