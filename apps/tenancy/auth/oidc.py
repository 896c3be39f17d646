"""Browser login through the platform's OpenID provider (mozilla-django-oidc).

Endpoints come from ``GPUAAS_OIDC_DISCOVERY_URL`` (fetched once, cached). Users
are matched on the issuer's ``sub`` through ``ExternalIdentity``, never on email.
The ID token's ``iss``, ``aud`` and expiry are checked on top of the library's
signature and nonce checks. CCP-style claims (``domain_id``, ``project_id``,
``roles``) are mirrored into memberships at each login. Logout ends the IdP
session too (RP-initiated logout with ``id_token_hint``).
"""

from __future__ import annotations

import logging
from functools import cache
from urllib.parse import urlencode

import httpx
import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from mozilla_django_oidc import views as oidc_views
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from apps.core import audit
from apps.tenancy.models import ExternalIdentity, Membership, Project, Tenant
from apps.tenancy.roles import PLATFORM_ROLES, TENANT_ONLY_ROLES, TENANT_WIDE_CCP_ROLES, ccp_role_map

logger = logging.getLogger("gpuaas.auth")

_DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


@cache
def discovery() -> dict:
    response = httpx.get(settings.OIDC_DISCOVERY_URL, timeout=5.0)
    response.raise_for_status()
    return response.json()


def oidc_setting(attr, *args):
    if attr in _DISCOVERED:
        return discovery()[_DISCOVERED[attr]]
    return import_from_settings(attr, *args)


class PlatformOIDCBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(oidc_setting)

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        try:
            # Signature was checked above; this adds issuer, audience and time checks.
            jwt.decode(
                token,
                options={"verify_signature": False, "require": ["iss", "aud", "exp", "sub"]},
                issuer=discovery()["issuer"],
                audience=self.OIDC_RP_CLIENT_ID,
                leeway=settings.JWT_LEEWAY_SECONDS,
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"ID token rejected: {exc}") from exc
        self._id_token_sub = payload.get("sub")
        return payload

    def verify_claims(self, claims) -> bool:
        # userinfo must be about the subject the ID token named.
        return bool(claims.get("sub")) and claims.get("sub") == getattr(self, "_id_token_sub", None)

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(
            identities__issuer=discovery()["issuer"], identities__subject=claims["sub"]
        )

    def create_user(self, claims):
        with transaction.atomic():
            user = self.UserModel.objects.create_user(username=_free_username(claims))
            user.set_unusable_password()
            user.save(update_fields=["password"])
            ExternalIdentity.objects.create(user=user, issuer=discovery()["issuer"], subject=claims["sub"])
            audit.record(None, "user.create_from_idp", target=user, details={"username": user.username})
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        user.email = claims.get("email", user.email) or ""
        user.first_name = (claims.get("given_name") or "")[:150]
        user.last_name = (claims.get("family_name") or "")[:150]
        user.save(update_fields=["email", "first_name", "last_name"])
        sync_memberships(user, claims)
        return user


def _free_username(claims) -> str:
    base = (claims.get("preferred_username") or claims["sub"])[:140]
    username, n = base, 1
    User = get_user_model()
    while User.objects.filter(username=username).exists():
        n += 1
        username = f"{base}-{n}"
    return username


@transaction.atomic
def sync_memberships(user, claims) -> None:
    """Replace the user's IdP-sourced memberships with what the claims say now."""
    domain_id, project_claim = claims.get("domain_id"), claims.get("project_id")
    tenant = Tenant.objects.filter(tenant_id=str(domain_id)).first() if domain_id else None
    project = (
        Project.objects.filter(tenant=tenant, project_id=str(project_claim)).first()
        if tenant and project_claim
        else None
    )
    wanted = set()
    role_map = ccp_role_map()
    roles = claims.get("roles") or []
    for role_name in roles if isinstance(roles, list) else []:
        if role_name not in role_map:
            continue
        role, limit = role_map[role_name]
        if role in PLATFORM_ROLES:
            continue  # platform roles are never granted by a login
        if tenant is None:
            continue
        if role_name in TENANT_WIDE_CCP_ROLES or role in TENANT_ONLY_ROLES:
            wanted.add((tenant.pk, None, role, limit))
        elif project is not None:
            wanted.add((tenant.pk, project.pk, role, limit))
    current = {
        (m.tenant_id, m.project_id, m.role, m.limit): m for m in Membership.objects.filter(user=user, source="idp")
    }
    for key in current.keys() - wanted:
        current[key].delete()
    for tenant_pk, project_pk, role, limit in wanted - current.keys():
        Membership.objects.get_or_create(
            user=user, tenant_id=tenant_pk, project_id=project_pk, role=role,
            defaults={"limit": limit, "source": "idp"},
        )


def provider_logout_url(request) -> str:
    """``OIDC_OP_LOGOUT_URL_METHOD``: end the IdP session as well."""
    post_logout = request.build_absolute_uri(settings.LOGOUT_REDIRECT_URL)
    endpoint = discovery().get("end_session_endpoint")
    if not endpoint:
        return post_logout
    params = {"post_logout_redirect_uri": post_logout, "client_id": settings.OIDC_RP_CLIENT_ID}
    id_token = request.session.get("oidc_id_token")
    if id_token:
        params["id_token_hint"] = id_token
    return f"{endpoint}?{urlencode(params)}"


class AuthenticationRequestView(oidc_views.OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)


class AuthenticationCallbackView(oidc_views.OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)


class LogoutView(oidc_views.OIDCLogoutView):
    get_settings = staticmethod(oidc_setting)
