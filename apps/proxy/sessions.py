"""Browser sessions on proxy routes (CONTRACT "Platform proxy", seed 002 "Session Model").

The launcher asks for a single-use ticket (at most 60 s, bound to the user and the
route) and posts it to ``{route origin}/_gpuaas/session``; the proxy answers with a
route-scoped HttpOnly cookie. The cookie names the route, the user and a digest of
the platform session it came from, so the platform session stays the outer
authority: logging out, losing access or stopping the instance ends it.

Decisions are cached for a few seconds. Each carries the generations of its user
and instance; bumping a generation (logout, membership or sharing change, stop)
makes every cached decision about them stale at once, on every proxy process.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import import_module
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.core import signing
from django.core.cache import cache
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from apps.core import audit
from apps.core.errors import Forbidden, NotFound, Unauthenticated
from apps.proxy.models import ProxySession
from apps.proxy.paths import base_path
from apps.tenancy import services as tenancy
from apps.tenancy.models import Tenant

COOKIE = "_gpuaas_route"
_SALT = "gpuaas.proxy.route-session"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def _gen_key(kind: str, ident) -> str:
    return f"proxy:gen:{kind}:{ident}"


def _ticket_key(ticket: str) -> str:
    return f"proxy:ticket:{_digest(ticket)}"


def invalidate_user(user_id) -> None:
    cache.set(_gen_key("user", user_id), uuid.uuid4().hex, settings.PROXY_SESSION_SECONDS)


def invalidate_instance(instance_id) -> None:
    cache.set(_gen_key("inst", instance_id), uuid.uuid4().hex, settings.PROXY_SESSION_SECONDS)


def instance_generation_key(instance_id) -> str:
    """The cache key of the instance's generation, which ``invalidate_instance`` changes."""
    return _gen_key("inst", instance_id)


def end_platform_session(session_key: str | None, user_id) -> None:
    """Logout: cookies minted from that session stop working, wherever they are."""
    if session_key:
        cache.set(f"proxy:ended:{_digest(session_key)}", 1, settings.PROXY_SESSION_SECONDS)
    invalidate_user(user_id)


# --- minting and exchanging ---------------------------------------------------------


def require_member(principal, instance, endpoint_name: str) -> None:
    """Platform operators open a tenant's apps only as members (``Principal.as_member``);
    ``decide`` holds the same line for every request."""
    from apps.runtime.selectors import visible_instances

    if principal.user is None:
        return  # ``mint`` refuses machines
    if not visible_instances(principal.as_member()).filter(pk=instance.pk).exists():
        audit.record(
            principal,
            "proxy.session.issue",
            target=instance,
            outcome="denied",
            details={"endpoint": endpoint_name, "reason": "not a member"},
        )
        raise Forbidden("Platform operators open a tenant's apps only as members of its project.")


def mint(principal, instance, endpoint_name: str, session) -> dict:
    """A ticket for the caller on one of the instance's routes (``instance`` is one the
    caller may see). ``session`` is the platform session the cookie will hang on."""
    from apps.proxy.routes import route_for

    if principal.user is None:
        raise Forbidden("App UI sessions are for people; service accounts call the app's API.")
    tenancy.require_not_suspended(instance.tenant)
    route = route_for(instance, endpoint_name)
    if route is None:
        raise NotFound(f"This app has no endpoint {endpoint_name!r} behind the platform proxy.")
    ticket = secrets.token_urlsafe(32)
    expires = time.time() + settings.PROXY_TICKET_SECONDS
    session_key = session.session_key if session is not None else None
    session_expires = session.get_expiry_date().timestamp() if session_key else None
    if session_key:
        ProxySession.objects.update_or_create(
            digest=_digest(session_key), defaults={"session_key": session_key, "user": principal.user}
        )
    cache.set(
        _ticket_key(ticket),
        {"route": str(route.pk), "user": principal.user.pk, "session": session_key, "until": session_expires},
        settings.PROXY_TICKET_SECONDS,
    )
    audit.record(
        principal,
        "proxy.session.issue",
        target=instance,
        details={"endpoint": endpoint_name, "route": route.slug},
    )
    return {
        "route": route,
        "ticket": ticket,
        "exchange_url": f"{route.origin}/_gpuaas/session",
        "open_url": entry_url(route),
        "expires_at": datetime.fromtimestamp(expires, tz=UTC),
        "mode": instance.ui_mode,
        "route_mode": route.mode,
    }


def entry_url(route) -> str:
    from apps.proxy.adapters import Adapter

    adapter = Adapter.from_policy(route.policy)
    base = route.public_url.rstrip("/")
    if route.mode == "subdomain" and adapter.base_url == "platform_path":
        base += base_path(route.instance_id, route.endpoint_name).rstrip("/")
    return base + adapter.entry_path


@dataclass(frozen=True)
class Exchanged:
    route_id: str
    cookie: str
    cookie_path: str
    max_age: int
    entry_path: str  # where the browser goes once it holds the cookie


def exchange(ticket: str, host: str) -> Exchanged:
    """Redeem a ticket once, on the origin of the route it was minted for."""
    from apps.proxy.models import ProxyRoute

    key = _ticket_key(ticket or "")
    data = cache.get(key)
    if data is None or not cache.delete(key):
        raise Unauthenticated(
            "This app link has expired or was already used; open the app again from the portal."
        )
    route = ProxyRoute.objects.filter(pk=data["route"]).first()
    if route is None or route.host != host:
        raise Unauthenticated("This app link belongs to another app.")
    lifetime = settings.PROXY_SESSION_SECONDS
    if data["until"]:
        lifetime = max(0, min(lifetime, int(data["until"] - time.time())))
    payload = {
        "r": data["route"],
        "u": data["user"],
        "s": _digest(data["session"]) if data["session"] else "",
        "e": int(time.time()) + lifetime,
    }
    return Exchanged(
        route_id=data["route"],
        cookie=signing.dumps(payload, salt=_SALT, compress=False),
        cookie_path=cookie_path(route),
        max_age=lifetime,
        entry_path=urlsplit(entry_url(route)).path,
    )


def cookie_path(route) -> str:
    return "/" if route.mode == "subdomain" else base_path(route.instance_id, route.endpoint_name)


def read_cookie(value: str | None) -> dict | None:
    if not value:
        return None
    payload = _verified(value)
    return payload if payload is not None and payload.get("e", 0) > time.time() else None


# Cookies by value, their signature checked once: a page's requests all carry the same
# cookie, and checking the signature was 6 % of the proxy's CPU per request. A value
# maps to one payload for good (the secret key does not change under a running
# process); the expiry is still checked on every request.
@functools.lru_cache(maxsize=10_000)
def _verified(value: str) -> dict | None:
    try:
        return signing.loads(value, salt=_SALT)
    except signing.BadSignature:
        return None


# --- deciding ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int = 200  # 401 no or ended session, 403 no access
    reason: str = ""
    user_id: int | None = None
    username: str = ""
    # The instance's state when decided: the decision is re-made at once when the
    # instance changes state, while a resolved route may be seconds old.
    app_state: str = "running"


def decision_keys(route_id: str, instance_id: str, payload: dict) -> list[str]:
    """The cache keys ``cached_decision`` reads (``apps.proxy.access`` reads them without a thread)."""
    user_id, session = payload["u"], payload["s"]
    keys = [
        _gen_key("user", user_id),
        _gen_key("inst", instance_id),
        f"proxy:dec:{route_id}:{user_id}:{session}",
    ]
    if session:
        keys.append(f"proxy:ended:{session}")
    return keys


def cached_decision(route_id: str, instance_id: str, payload: dict) -> tuple[Decision | None, tuple]:
    """The cached decision if still current, and the generations it must carry."""
    keys = decision_keys(route_id, instance_id, payload)
    return current_decision(keys, cache.get_many(keys))


def current_decision(keys: list[str], found: dict) -> tuple[Decision | None, tuple]:
    """``cached_decision`` from the values read for ``keys`` (missing keys absent from ``found``)."""
    if len(keys) > 3 and found.get(keys[3]):
        return Decision(False, 401, "you logged out of the portal"), ()
    generations = (found.get(keys[0]), found.get(keys[1]))
    cached = found.get(keys[2])
    if cached and cached[0] == generations:
        return cached[1], generations
    return None, generations


def decide(route_id: str, instance_id: str, payload: dict, generations: tuple) -> Decision:
    """Fresh from the database: the user still exists and still may see the instance,
    and the instance's tenant is not suspended."""
    from apps.runtime.selectors import visible_instances
    from apps.tenancy.principal import for_user

    user = get_user_model().objects.filter(pk=payload["u"], is_active=True).first()
    if user is None:
        decision = Decision(False, 401, "your account is not active")
    elif payload["s"] and not _platform_session_alive(payload["s"], user):
        decision = Decision(False, 401, "your portal session has ended", user.pk, user.get_username())
    else:
        visible = visible_instances(for_user(user).as_member()).filter(pk=instance_id)
        state, tenant_status = visible.values_list("state", "tenant__status").first() or (None, None)
        if state is None:
            decision = Decision(False, 403, "you no longer have access to this app", user.pk, user.username)
        elif tenant_status == Tenant.Status.SUSPENDED:
            decision = Decision(False, 403, "your tenant is suspended", user.pk, user.username)
        else:
            decision = Decision(True, 200, "", user.pk, user.get_username(), app_state=state)
    cache.set(
        f"proxy:dec:{route_id}:{payload['u']}:{payload['s']}",
        (generations, decision),
        settings.PROXY_AUTHZ_CACHE_SECONDS,
    )
    return decision


def _platform_session_alive(digest: str, user) -> bool:
    """The platform session the cookie came from still exists in the session store and
    still belongs to ``user`` as the user is now (a password change ends it, as
    Django's own session check does)."""
    record = ProxySession.objects.filter(digest=digest, user=user).first()
    if record is None:
        return False
    data = import_module(settings.SESSION_ENGINE).SessionStore(record.session_key).load()
    return data.get(SESSION_KEY) == str(user.pk) and constant_time_compare(
        data.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()
    )


def prune_sessions() -> int:
    """Records no live cookie can name any more (cookies live PROXY_SESSION_SECONDS at most)."""
    cutoff = timezone.now() - timedelta(seconds=settings.PROXY_SESSION_SECONDS)
    return ProxySession.objects.filter(created_at__lt=cutoff).delete()[0]


class _Actor:
    def __init__(self, name: str):
        self.audit_actor, self.audit_actor_type = name or "anonymous", "user" if name else "anonymous"


def record_denial(route_id: str, instance, who: str, reason: str, channel: str) -> None:
    """Denials are audited once a minute per route and person, so a retrying page cannot flood the log."""
    if cache.add(f"proxy:denied:{route_id}:{who}", 1, 60):
        audit.record(
            _Actor(who),
            "proxy.access",
            target=instance,
            outcome="denied",
            details={"route": route_id, "reason": reason, "channel": channel},
        )
