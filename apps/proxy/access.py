"""What the data plane asks the control plane, per request, and cheaply.

``resolve`` maps a request's host and path to a ``Target`` (the route, its
upstream, its adapter, its limits, the secret it bridges); targets are kept in
process for two seconds. ``authorize`` checks the route cookie against the
platform's decision, cached for a few seconds and invalidated by generation (see
``sessions``), and hands back the target reloaded when its instance's generation
moved since it was loaded: a restart with a new token (or any change of the
instance) is followed by the next request, not two seconds later. Both are async:
the ASGI proxy calls them before any byte goes upstream.

A cache miss is loaded once per process however many requests wait on it: when
an entry expires under load, every request in flight would otherwise go to the
database together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from cachetools import TTLCache
from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.redis import RedisSerializer
from django.core.exceptions import ValidationError
from django.db import close_old_connections

from apps.core import origins
from apps.proxy import redis_client, sessions, socket_audit
from apps.proxy.adapters import Adapter
from apps.proxy.dataplane import limits
from apps.proxy.perloop import PerLoop

log = logging.getLogger(__name__)
_TTL = 2.0
_ACTIVITY_EVERY = 15.0
_targets: TTLCache[tuple, Target | None] = TTLCache(maxsize=10_000, ttl=_TTL)
# Routes whose traffic was written in the last _ACTIVITY_EVERY seconds.
_written: TTLCache[str, bool] = TTLCache(maxsize=10_000, ttl=_ACTIVITY_EVERY)


@dataclass(frozen=True)
class Target:
    route_id: str
    instance_id: str
    slug: str
    mode: str  # "subdomain" | "path_prefix"
    state: str  # "active" | "pending" | "removed"
    state_message: str
    upstream: tuple[str, int] | None
    public_prefix: str  # "/w/{iid}/{ep}/" (path_prefix) or "/" (subdomain)
    upstream_prefix: str  # the prefix the app serves under: "/w/{iid}/{ep}/" or "/"
    origin: str  # scheme://host[:port] the browser uses for this route
    portal_url: str  # the instance's page in the portal, for error pages
    bridge_headers: tuple[tuple[str, str], ...]
    redact: tuple[bytes, ...]  # values that must never reach the browser (the bridged secret)
    frame_ancestors: str
    websocket: bool
    auth: str
    entry_path: str
    limit_per_instance: int
    limit_per_user: int
    key: tuple  # what ``resolve`` keeps it under
    generation: str | None  # the instance's generation (``sessions``) it was loaded under

    def upstream_path(self, path: str) -> str:
        """The path sent upstream for a browser path under this route."""
        if self.mode == "path_prefix":
            rest = path[len(self.public_prefix) :]
            return self.upstream_prefix + rest
        if self.upstream_prefix != "/" and not path.startswith(self.upstream_prefix):
            return self.upstream_prefix + path.lstrip("/")
        return path

    def outside(self, path: str) -> bool:
        """Whether a path resolved to this route lies outside it: on a path_prefix
        route, one not under its prefix (its own path without the slash among them,
        which ``slash_location`` redirects)."""
        return self.mode == "path_prefix" and not path.startswith(self.public_prefix)

    def slash_location(self, path: str, query: str) -> str | None:
        """Where a path_prefix route's own path without its slash is redirected (308),
        or None for any other path."""
        if self.mode != "path_prefix" or path != self.public_prefix.rstrip("/"):
            return None
        return self.public_prefix + ("?" + query if query else "")

    def foreign(self, origin: str | None, scope: dict, host: str) -> bool:
        """Whether a browser's ``Origin`` says the request was made by a page elsewhere
        (decision 0076). Apps' origins are siblings under the apps domain (and
        path_prefix routes share the portal's), one site to the browser: it sends this
        route's SameSite=Lax cookie with what script on another route asks for, the
        bridge signs that in, and the app's own origin check sees its own origin (the
        proxy gives it that). ``null`` (an opaque origin) is foreign too; none at all is
        not a browser's script.

        A path_prefix route is on the portal's origin under whichever of the portal's
        names the browser used (127.0.0.1 or localhost on the embedded default): its
        own origin is the request's, ``scheme://Host``, as Django's CSRF check has it
        (decision 0077); ``host`` is the request's Host, ``scope`` says its scheme."""
        if not origin or origin == self.origin:
            return False
        return self.mode != "path_prefix" or not origins.same_origin(origin, scope, host)

    def public_path(self, upstream_path: str) -> str:
        """The browser path for a path the app emitted (redirects, cookie paths)."""
        if self.mode == "path_prefix" and self.upstream_prefix == "/":
            return self.public_prefix + upstream_path.lstrip("/")
        return upstream_path


def _in_thread(func):
    """``func`` in a worker thread, its database connection handed back to the pool
    when it returns: there is no request end to do it, and a worker thread would
    otherwise keep one pooled connection for good."""

    def run(*args):
        try:
            return func(*args)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False)


class _SingleFlight:
    """One load per key at a time, per event loop; the others wait for its result."""

    def __init__(self):
        self._pending: PerLoop[dict] = PerLoop(dict)

    async def run(self, key, load, *args):
        pending = self._pending.get()
        task = pending.get(key)
        if task is None:
            task = pending[key] = asyncio.ensure_future(load(*args))
            task.add_done_callback(lambda _: pending.pop(key, None))
        # Shielded: one request going away must not cancel the load the others wait on.
        return await asyncio.shield(task)


_loads = _SingleFlight()


def is_proxied(host: str, path: str) -> bool:
    """Whether a request belongs to the proxy at all; no database, no cache."""
    if path.startswith(("/w/", "/_gpuaas/")):
        return True
    domain = settings.APPS_DOMAIN
    return bool(domain) and host.split(":", 1)[0].endswith("." + domain)


def _key(host: str, path: str) -> tuple | None:
    hostname = host.split(":", 1)[0]
    domain = settings.APPS_DOMAIN
    if domain and hostname.endswith("." + domain):
        return ("slug", hostname[: -len(domain) - 1])
    if path.startswith("/w/"):
        parts = path.split("/", 4)
        if len(parts) >= 4 and parts[2] and parts[3]:
            return ("path", parts[2], parts[3])
    return None


async def resolve(host: str, path: str) -> Target | None:
    key = _key(host, path)
    if key is None:
        return None
    try:
        return _targets[key]
    except KeyError:
        pass
    return await _reload(key)


async def _reload(key: tuple) -> Target | None:
    target = _targets[key] = await _loads.run(key, _fresh, key)
    return target


async def _fresh(key: tuple) -> Target | None:
    instance_id = key[1] if key[0] == "path" else None
    if instance_id is None:  # which instance serves this host: loaded once to learn it
        found = await _in_thread(_load)(key, _UNREAD)
        if found is None:
            return None
        instance_id = found.instance_id
    generation = await _generation(instance_id)
    # Loaded after the generation is read: a change bumps it once committed, so a target
    # made from rows older than a change carries an older generation and is reloaded.
    return await _in_thread(_load)(key, generation)


_UNREAD = "-"  # a generation no instance has: a target loaded while Redis did not answer


async def _generation(instance_id: str) -> str | None:
    """The instance's generation, read as ``_authorize`` reads it (Redis's time bound)."""
    key = sessions.instance_generation_key(instance_id)
    url = _cache_redis_url()
    if url is None:
        return cache.get(key)
    try:
        raw = await redis_client.call(url, "GET", _raw_keys((key,))[0])
    except redis_client.Unavailable:
        return _UNREAD  # its access cannot be checked either: answered 503 until Redis is back
    return None if raw is None else _value(raw)


def forget() -> None:
    """Drop the in-process cache (tests, and a route change made in this process)."""
    _targets.clear()


def _load(key: tuple, generation: str | None) -> Target | None:
    from apps.proxy.models import ProxyRoute
    from apps.proxy.paths import base_path
    from apps.runtime.selectors import runtime_secret

    routes = ProxyRoute.objects.select_related("instance")
    if key[0] == "slug":
        route = routes.filter(slug=key[1], mode="subdomain").first()
    else:
        try:
            route = routes.filter(instance_id=key[1], endpoint_name=key[2], mode="path_prefix").first()
        except ValidationError:  # not a UUID
            return None
    if route is None or route.instance is None:
        return None
    adapter = Adapter.from_policy(route.policy)
    instance = route.instance
    base = base_path(instance.pk, route.endpoint_name)
    headers, redact = (), ()
    if adapter.auth == "upstream_token_bridge" and route.status == "active":
        secret = runtime_secret(instance, adapter.bridge_secret) or ""
        if secret:
            value = f"{adapter.bridge_scheme} {secret}".strip()
            headers, redact = ((adapter.bridge_header, value),), (secret.encode(),)
    limits = route.policy.get("limits", {})
    issuer = urlsplit(settings.ISSUER)
    portal_origin = f"{issuer.scheme}://{issuer.netloc}"
    framed_by, portal = portal_origin, settings.ISSUER
    if route.mode == "path_prefix" and route.origin == portal_origin:
        # The portal and the route share an origin, under whichever name the browser
        # used for both (127.0.0.1 or localhost on the embedded default): the portal
        # frames it as 'self', and its pages link back on that same name, where the
        # browser holds its portal session.
        framed_by, portal = "'self'", ""
    return Target(
        route_id=str(route.pk),
        instance_id=str(instance.pk),
        slug=route.slug,
        mode=route.mode,
        state=route.status,
        state_message=route.status_reason or f"the app is {instance.state}",
        upstream=(route.upstream_host, route.upstream_port) if route.status == "active" else None,
        public_prefix=base if route.mode == "path_prefix" else "/",
        upstream_prefix=base if adapter.base_url == "platform_path" else "/",
        origin=route.origin,
        portal_url=f"{portal}/projects/{instance.project_id}/instances/{instance.pk}/",
        bridge_headers=headers,
        redact=redact,
        frame_ancestors=framed_by if route.policy.get("embedded") else "'none'",
        websocket=adapter.websocket,
        auth=adapter.auth,
        entry_path=urlsplit(sessions.entry_url(route)).path,
        limit_per_instance=limits.get("per_instance", settings.PROXY_MAX_CONNECTIONS_PER_INSTANCE),
        limit_per_user=limits.get("per_user", settings.PROXY_MAX_CONNECTIONS_PER_USER),
        key=key,
        generation=generation,
    )


def unavailable(target: Target, decision: sessions.Decision) -> str | None:
    """Why an authorized request cannot reach the app now, or None. A stop shows in
    the decision on the next request; the resolved route may be two seconds old."""
    if decision.app_state != "running":
        return f"the app is {decision.app_state}"
    if target.state != "active" or target.upstream is None:
        return target.state_message
    return None


async def authorize(
    target: Target, cookie: str | None, channel: str = "http"
) -> tuple[sessions.Decision, Target]:
    """May the holder of this route cookie reach this target now? With the target to
    use: ``target``, or it reloaded when its instance changed since it was loaded."""
    decision, _, target = await _authorize(target, cookie, channel, count=False)
    return decision, target


async def admit(
    target: Target, cookie: str | None, channel: str
) -> tuple[sessions.Decision, limits.Count | None, Target]:
    """``authorize``, and the connection counted against the route's limits, in one
    Redis command. The count is None when a limit is reached or access is refused;
    the caller gives a count back (``limits.release``) when the connection ends."""
    return await _authorize(target, cookie, channel, count=True)


async def _authorize(target: Target, cookie: str | None, channel: str, count: bool):
    payload = sessions.read_cookie(cookie)
    if payload is None or payload.get("r") != target.route_id:
        decision = sessions.Decision(False, 401, "no session for this app")
        await _in_thread(_deny)(target, decision, None, channel)
        return decision, None, target
    url = _cache_redis_url()
    keys = sessions.decision_keys(target.route_id, target.instance_id, payload)
    counted = None
    if url is None:
        # In process (the embedded default): the local cache answers without any I/O.
        found = cache.get_many(keys)
        if count:
            counted, _ = await limits.acquire(None, target, payload["u"])
    else:
        # The same keys as Django's cache, read with the decision's serialization.
        raw = _raw_keys(tuple(keys))
        try:
            if count:
                counted, values = await limits.acquire(url, target, payload["u"], raw)
            else:
                values = await redis_client.call(url, "MGET", *raw)
        except redis_client.Unavailable as exc:
            log.warning("route %s: access not checked, answered 503: %s", target.route_id, exc)
            return (
                sessions.Decision(False, 503, "The platform cannot check access to this app right now."),
                None,
                target,
            )
        found = {key: _value(value) for key, value in zip(keys, values, strict=True) if value is not None}
    if found.get(keys[1]) != target.generation:
        # The instance changed since the target was loaded (a restart with a new token, a
        # stop): this request already goes by the change.
        target = await _reload(target.key) or target
    decision, generations = sessions.current_decision(keys, found)
    if decision is None:
        key = ("decide", target.route_id, target.instance_id, payload["u"], payload["s"], generations)
        decision = await _loads.run(
            key, _in_thread(sessions.decide), target.route_id, target.instance_id, payload, generations
        )
    if not decision.allowed:
        if counted is not None:
            limits.release(counted)
            counted = None
        await _in_thread(_deny)(target, decision, payload, channel)
    return decision, counted, target


_serializer = RedisSerializer()


@functools.lru_cache(maxsize=10_000)
def _raw_keys(keys: tuple[str, ...]) -> tuple[bytes | str, ...]:
    """Django's names for cache keys: ``cache`` resolves its backend on every
    attribute, which costs more than the Redis read itself."""
    return tuple(cache.make_key(key) for key in keys)


# The values read, by their bytes: the same generations and decisions come back on
# every request of a session, and unpickling them costs more than the lookup.
@functools.lru_cache(maxsize=10_000)
def _value(raw: bytes):
    return _serializer.loads(raw)


def _cache_redis_url() -> str | None:
    """The Redis server Django's cache writes to, when the cache is Redis (the
    connection counts live there too, so one command can read and count)."""
    config = settings.CACHES["default"]
    if config["BACKEND"] != "django.core.cache.backends.redis.RedisCache":
        return None
    location = config["LOCATION"]
    return _first_server(location) if isinstance(location, str) else location[0]


@functools.cache
def _first_server(location: str) -> str:
    return re.split("[;,]", location)[0]


def _deny(target: Target, decision: sessions.Decision, payload: dict | None, channel: str) -> None:
    from apps.runtime.selectors import find_instance

    who = decision.username or (f"user:{payload['u']}" if payload else "")
    instance = find_instance(target.instance_id)
    sessions.record_denial(target.route_id, instance, who, decision.reason, channel)


async def audit_websocket(action: str, route_id: str, username: str, source_ip: str | None, details: dict):
    """An audit record of a proxied WebSocket (``socket_audit``), written in a worker thread."""
    await _in_thread(socket_audit.record)(action, route_id, username, source_ip, details)


async def exchange(ticket: str, host: str) -> sessions.Exchanged:
    return await _in_thread(sessions.exchange)(ticket, host)


async def touch(target: Target) -> None:
    """Traffic on a route: written through at most every few seconds per process."""
    if target.route_id in _written:
        return
    _written[target.route_id] = True
    from apps.proxy.routes import touch as write

    await _in_thread(write)(target.route_id)
