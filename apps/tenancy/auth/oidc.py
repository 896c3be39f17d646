"""Browser login through the platform's OpenID provider (mozilla-django-oidc).

Endpoints come from ``GPUAAS_OIDC_DISCOVERY_URL`` (fetched on first use, cached
per URL). The flow is the authorization code flow with PKCE (S256), state and
nonce. Users are matched on the issuer's ``sub`` through ``ExternalIdentity``,
never on email. The ID token's signature (RS256, the IdP's JWKS), ``iss``,
``aud`` and expiry are checked. CCP-style claims (``domain_id``,
``project_id``, ``roles``) are mirrored into memberships at each login. Logout
ends the IdP session too (RP-initiated logout with ``id_token_hint``).
"""

from __future__ import annotations

import logging
from functools import cache
from urllib.parse import urlencode

import httpx
import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import IntegrityError, transaction
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from mozilla_django_oidc import views as oidc_views
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from apps.core import audit, outbound
from apps.tenancy.models import ExternalIdentity, Membership, Project, Tenant
from apps.tenancy.roles import PLATFORM_ROLES, TENANT_ONLY_ROLES, TENANT_WIDE_CCP_ROLES, ccp_role_map

logger = logging.getLogger("gpuaas.auth")

# What a failed exchange with the IdP can raise: it is unreachable or answers an
# error (httpx for discovery, requests inside mozilla-django-oidc), or what it
# sent does not verify (a replayed or unknown state, a bad ID token).
LOGIN_ERRORS = (httpx.HTTPError, requests.RequestException, SuspiciousOperation)

_DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


@cache
def _discover(url: str) -> dict:
    response = httpx.get(url, timeout=5.0, verify=outbound.tls())
    response.raise_for_status()
    document = response.json()
    # OpenID Connect Discovery 1.0, 4.3: the document must name the issuer it was
    # fetched for, or a compromised or misconfigured URL could vouch for any issuer.
    issuer = document.get("issuer", "")
    if f"{issuer.rstrip('/')}/.well-known/openid-configuration" != url:
        raise ImproperlyConfigured(f"GPUAAS_OIDC_DISCOVERY_URL: {url} describes issuer {issuer!r}")
    return document


def discovery() -> dict:
    return _discover(settings.OIDC_DISCOVERY_URL)


def forget_discovery() -> None:
    """Drop the cached discovery documents (tests start providers on new ports)."""
    _discover.cache_clear()


def oidc_setting(attr, *args):
    if attr in _DISCOVERED:
        return discovery()[_DISCOVERED[attr]]
    return import_from_settings(attr, *args)


def _discovered(key: str) -> property:
    return property(lambda self: discovery()[key])


class PlatformOIDCBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        # The library resolves every endpoint here, but Django builds this backend
        # for each request of a signed-in user and for every local login attempt:
        # endpoints are resolved on use instead (the properties below), so those
        # keep working while the IdP is unreachable.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None  # always the IdP's published JWKS
        self.UserModel = get_user_model()

    OIDC_OP_TOKEN_ENDPOINT = _discovered("token_endpoint")
    OIDC_OP_USER_ENDPOINT = _discovered("userinfo_endpoint")
    OIDC_OP_JWKS_ENDPOINT = _discovered("jwks_uri")

    def get_user(self, user_id):
        # Django reads the session's user through the backend that signed it in. The
        # library's answers any user, so an account an operator deactivated kept its
        # portal sessions (pages, forms, sockets) until they expired; ModelBackend's
        # answers active users only, ending them at the next request.
        user = super().get_user(user_id)
        return user if self.user_can_authenticate(user) else None

    def get_payload_data(self, token, key):
        # The library checks the signature only; OpenID Connect Core 3.1.3.7 also
        # wants the token to come from our issuer, be meant for us and be current.
        # ``algorithms`` pins RS256, so a token cannot pick its own algorithm.
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                issuer=discovery()["issuer"],
                audience=self.OIDC_RP_CLIENT_ID,
                leeway=settings.JWT_LEEWAY_SECONDS,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"ID token rejected: {exc}") from exc
        # A token for several audiences must say it was issued to us (Core 3.1.3.7, 4-5).
        several_audiences = isinstance(payload["aud"], list) and len(payload["aud"]) > 1
        if several_audiences and payload.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("ID token rejected: azp is not this client")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        claims = super().get_userinfo(access_token, id_token, payload)
        # Core 5.3.2: userinfo must be about the subject the verified ID token names.
        if claims.get("sub") != payload["sub"]:
            raise SuspiciousOperation("userinfo describes another subject than the ID token")
        return claims

    def verify_claims(self, claims) -> bool:
        # Only the subject is needed: email is informational here, never an identity.
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(
            identities__issuer=discovery()["issuer"], identities__subject=claims["sub"]
        )

    def create_user(self, claims):
        try:
            with transaction.atomic():
                user = self.UserModel.objects.create_user(username=_free_username(claims))
                user.set_unusable_password()
                user.save(update_fields=["password"])
                ExternalIdentity.objects.create(
                    user=user, issuer=discovery()["issuer"], subject=claims["sub"]
                )
                audit.record(None, "user.create_from_idp", target=user, details={"username": user.username})
        except IntegrityError:
            # The same person's first sign-in in two tabs: the other one made the user
            # (or took the free username) since this one looked.
            user = self.filter_users_by_claims(claims).first()
            if user is None:
                raise
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        # Informational claims, as the user's columns hold them: an address too long for
        # its column is no address at all, a name is cut to fit, anything else is left out.
        email = claims.get("email", user.email)
        user.email = email if isinstance(email, str) and len(email) <= 254 else ""
        user.first_name = _name(claims.get("given_name"))
        user.last_name = _name(claims.get("family_name"))
        user.save(update_fields=["email", "first_name", "last_name"])
        sync_memberships(user, claims)
        return user


def _name(value) -> str:
    return value[:150] if isinstance(value, str) else ""


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
    if tenant is not None and not tenant.admits_realm(claims.get("realm_name")):
        logger.warning(
            "OIDC sign-in of %s: its realm is not tenant %s's; no tenant role", user, tenant.tenant_id
        )
        tenant = None
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
        (m.tenant_id, m.project_id, m.role, m.limit): m
        for m in Membership.objects.filter(user=user, source=Membership.IDP)
    }
    # Audited as the platform's own act (the IdP vouched, no principal asked), and only
    # what changed: a login that confirms the same roles writes nothing.
    for key in current.keys() - wanted:
        membership = current[key]
        audit.record(None, "member.remove", target=membership, details=_membership_details(user, membership))
        membership.delete()
    for tenant_pk, project_pk, role, limit in wanted - current.keys():
        membership, created = Membership.objects.get_or_create(
            user=user,
            tenant_id=tenant_pk,
            project_id=project_pk,
            role=role,
            defaults={"limit": limit, "source": Membership.IDP},
        )
        if created:
            audit.record(None, "member.add", target=membership, details=_membership_details(user, membership))


def _membership_details(user, membership: Membership) -> dict:
    return {
        "user": user.get_username(),
        "role": membership.role,
        "limit": membership.limit,
        "source": Membership.IDP,
    }


def provider_logout_url(request) -> str:
    """``OIDC_OP_LOGOUT_URL_METHOD``: end the IdP session as well.

    Only a session that came from the IdP (it holds the ID token) goes there; a
    local login on the same portal just returns to the login page.
    """
    post_logout = request.build_absolute_uri(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    try:
        endpoint = discovery().get("end_session_endpoint") if id_token else None
    except httpx.HTTPError as exc:
        logger.warning("OIDC discovery failed during logout, ending the local session only: %s", exc)
        endpoint = None
    if not endpoint:
        return post_logout
    params = {
        "id_token_hint": id_token,
        "post_logout_redirect_uri": post_logout,
        "client_id": settings.OIDC_RP_CLIENT_ID,
    }
    return f"{endpoint}?{urlencode(params)}"


def _login_failed(exc: Exception):
    logger.warning("OIDC login failed: %s", exc)
    return redirect(settings.LOGIN_REDIRECT_URL_FAILURE)


class AuthenticationRequestView(oidc_views.OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, **kwargs):
        # The library discovers the endpoint while building the view, where a
        # failure could only be a 500; it is resolved in get() instead.
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request):
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery()["authorization_endpoint"]
        except httpx.HTTPError as exc:
            return _login_failed(exc)
        return super().get(request)


class AuthenticationCallbackView(oidc_views.OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        try:
            return super().get(request)
        except LOGIN_ERRORS as exc:
            # A stale tab, a replayed callback or an unreachable IdP: back to the
            # login page with an error rather than a bare 400/500.
            return _login_failed(exc)


class LogoutView(oidc_views.OIDCLogoutView):
    get_settings = staticmethod(oidc_setting)

    def post(self, request):
        response = super().post(request)
        target = response["Location"]
        if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
            return response
        # Portal pages let forms submit to this origin only (CSP form-action 'self'),
        # and browsers hold the redirects after a submission to that too: the sign-out
        # form's redirect to the IdP would be blocked. This page of ours, its own
        # navigation, makes that last step instead (Refresh header, or the link).
        response = render(request, "registration/oidc_logout.html", {"provider_logout_url": target})
        response["Refresh"] = f"0;url={target}"
        return response
