"""OIDC browser login against a real OpenID provider (oidc-provider on Node) in
headless Chromium: code flow with PKCE, users matched on (issuer, sub), claims
mirrored into memberships, RP-initiated logout, ID token checks."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation

from apps.tenancy.auth import oidc
from apps.tenancy.models import ExternalIdentity, Membership
from tests.e2e.oidc_support import CLIENT_ID, OpenIDProvider, use_provider
from tests.factories import MembershipFactory, TenantFactory, UserFactory

User = get_user_model()


@pytest.fixture
def start_idp(settings, tmp_path):
    """Starts a provider whose client redirects to ``portal_url`` and points the portal at it."""
    started = []

    def start(portal_url: str) -> OpenIDProvider:
        started.append(OpenIDProvider(tmp_path, portal_url).start())
        use_provider(settings, started[-1])
        return started[-1]

    yield start
    for provider in started:
        provider.stop()
    oidc.forget_discovery()


@pytest.fixture
def idp(portal, start_idp):
    return start_idp(portal.url)


@pytest.fixture
def idp_without_portal(start_idp):
    """For checks of the backend alone: discovery and JWKS, no redirect ever followed."""
    return start_idp("http://127.0.0.1:9")


def sign_in_with_organisation(page, portal, login: str) -> None:
    """From the portal's login page through the provider's login form back to the dashboard."""
    page.goto(f"{portal.url}/accounts/login/")
    page.click("text=Sign in with your organisation")
    page.fill("input[name=login]", login)  # the provider's own form: any login, any password
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/")
    assert page.locator("h1").inner_text() == "Dashboard"


def requests_to(page, url_prefix: str) -> list[str]:
    """The URLs the browser requests under ``url_prefix`` from now on (redirect hops included)."""
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url) if r.url.startswith(url_prefix) else None)
    return urls


def identity_user(idp, subject: str):
    return ExternalIdentity.objects.select_related("user").get(issuer=idp.issuer, subject=subject).user


def test_login_uses_pkce_and_maps_claims_to_memberships(portal, idp, page):
    tenant = TenantFactory(tenant_id="acme")
    idp.set_claims("alice", email="alice@acme.test", domain_id="acme", roles=["Tenant Administrator"])
    authorization_requests = requests_to(page, f"{idp.issuer}/auth")

    sign_in_with_organisation(page, portal, "alice")

    assert "alice" in page.locator(".who").inner_text()
    assert page.js_errors == []
    query = parse_qs(urlsplit(authorization_requests[0]).query)
    assert query["response_type"] == ["code"]
    assert query["client_id"] == [CLIENT_ID]
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43  # base64url SHA-256, never the verifier itself
    # The provider requires PKCE and checks the verifier at the token endpoint:
    # reaching the dashboard means the portal sent the matching one.
    assert query["state"]
    assert query["nonce"]
    user = identity_user(idp, "alice")
    assert (user.username, user.email, user.has_usable_password()) == ("alice", "alice@acme.test", False)
    membership = Membership.objects.get(user=user)
    assert (membership.tenant, membership.project, membership.role, membership.source) == (
        tenant,
        None,
        "tenant_admin",
        "idp",
    )


def test_returning_subject_is_the_same_user_and_idp_roles_follow_the_claims(portal, idp, page):
    tenant = TenantFactory(tenant_id="acme")
    idp.set_claims("dave", email="dave@old.test", domain_id="acme", roles=["Tenant Administrator"])
    sign_in_with_organisation(page, portal, "dave")
    user = identity_user(idp, "dave")
    MembershipFactory(user=user, tenant=tenant, role="viewer")  # granted in the portal, not by the IdP

    page.context.clear_cookies()  # a new browser session: portal and provider both ask again
    idp.set_claims("dave", email="dave@new.test", domain_id="acme", roles=[])
    sign_in_with_organisation(page, portal, "dave")

    assert User.objects.filter(identities__subject="dave").count() == 1
    user.refresh_from_db()
    assert user.email == "dave@new.test"
    assert list(Membership.objects.filter(user=user).values_list("role", "source")) == [("viewer", "local")]


def test_subject_is_never_matched_on_email(portal, idp, page):
    local = UserFactory(username="erin", email="erin@acme.test")
    idp.set_claims("mallory", email="erin@acme.test", preferred_username="erin")

    sign_in_with_organisation(page, portal, "mallory")

    user = identity_user(idp, "mallory")
    assert user.pk != local.pk
    assert user.username == "erin-2"  # a taken username is never reused either
    assert "erin-2" in page.locator(".who").inner_text()
    assert not ExternalIdentity.objects.filter(user=local).exists()


def test_login_returns_to_the_page_asked_for(portal, idp, page):
    page.goto(f"{portal.url}/projects/")
    page.click("text=Sign in with your organisation")  # the login page passes ?next= along
    page.fill("input[name=login]", "grace")
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/projects/")


def test_sign_out_ends_the_provider_session(portal, idp, page):
    sign_in_with_organisation(page, portal, "frank")
    logout_requests = requests_to(page, f"{idp.issuer}/session/end")

    page.click("text=Sign out")
    page.click("text=Yes, sign me out")
    page.wait_for_url(f"{portal.url}/accounts/login/")

    hint = parse_qs(urlsplit(logout_requests[0]).query)["id_token_hint"][0]
    assert jwt.decode(hint, options={"verify_signature": False})["sub"] == "frank"
    page.goto(f"{portal.url}/")
    assert "/accounts/login/" in page.url
    page.goto(f"{portal.url}/oidc/authenticate/")
    assert page.locator("input[name=login]").is_visible()  # the provider asks again: no silent login
    assert page.js_errors == []


def test_local_account_signs_in_and_out_without_the_provider(portal, idp, page):
    UserFactory(username="root")
    visited_provider = requests_to(page, idp.issuer)
    page.goto(f"{portal.url}/accounts/login/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/")

    page.click("text=Sign out")  # posts to /oidc/logout/, the sign-out of every page when OIDC is on
    page.wait_for_url(f"{portal.url}/accounts/login/")
    assert visited_provider == []


def test_callback_with_unknown_state_returns_to_login_with_an_error(portal, idp, page):
    page.goto(f"{portal.url}/oidc/authenticate/")  # a session with one pending state
    page.goto(f"{portal.url}/oidc/callback/?code=forged&state=not-the-one-we-sent")
    assert urlsplit(page.url).path == "/accounts/login/"
    assert page.locator(".error").inner_text() == "Sign-in with the identity provider failed. Try again."


def id_token_claims(idp, **overrides) -> dict:
    now = int(time.time())
    claims = {"iss": idp.issuer, "aud": CLIENT_ID, "sub": "alice", "nonce": "n-1"}
    return {**claims, "iat": now, "exp": now + 300, **overrides}


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"aud": "another-client"}, id="wrong-aud"),
        pytest.param({"aud": ["another-client", CLIENT_ID]}, id="shared-aud-without-azp"),
        pytest.param({"iss": "http://localhost:1"}, id="wrong-iss"),
        pytest.param({"exp": int(time.time()) - 3600}, id="expired"),
        pytest.param({"nonce": "replayed"}, id="wrong-nonce"),
    ],
)
def test_id_token_checks_issuer_audience_expiry_and_nonce(idp_without_portal, overrides):
    idp = idp_without_portal
    backend = oidc.PlatformOIDCBackend()
    assert backend.verify_token(idp.sign(id_token_claims(idp)), nonce="n-1")["sub"] == "alice"
    with pytest.raises(SuspiciousOperation):
        backend.verify_token(idp.sign(id_token_claims(idp, **overrides)), nonce="n-1")


def test_id_token_signed_with_another_key_is_rejected(idp_without_portal):
    idp = idp_without_portal
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = idp.sign(id_token_claims(idp), key=stranger)  # same kid as the provider's key
    with pytest.raises(SuspiciousOperation):
        oidc.PlatformOIDCBackend().verify_token(token, nonce="n-1")


@pytest.mark.django_db
def test_a_first_sign_in_with_odd_profile_claims_still_signs_in(idp_without_portal):
    """The provider's profile is informational: an address too long for the column, or
    claims that are not strings, leave those fields empty rather than fail the sign-in."""
    backend = oidc.PlatformOIDCBackend()
    claims = {
        "sub": "odd",
        "email": "a" * 250 + "@example.com",
        "given_name": ["Al"],
        "family_name": "B" * 400,
    }
    user = backend.create_user(claims)
    user.refresh_from_db()
    assert (user.email, user.first_name, user.last_name) == ("", "", "B" * 150)


@pytest.mark.django_db
def test_two_first_sign_ins_of_one_person_make_one_user(idp_without_portal):
    """The second sign-in looked for the subject before the first one made the user."""
    backend = oidc.PlatformOIDCBackend()
    claims = {"sub": "twice", "preferred_username": "twice", "email": "twice@example.com"}
    first = backend.create_user(claims)
    assert backend.create_user(claims) == first
    assert get_user_model().objects.filter(identities__subject="twice").count() == 1
