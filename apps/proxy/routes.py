"""Route selection and the route lifecycle (seed 003 "Route Selection Algorithm").

A route is planned when an instance is launched (so its URL is known at once),
becomes ``active`` when the app runs and has reported its upstream, and is
``removed`` when it stops. The upstream host and port are only ever read from
the route: nothing a browser sends chooses where the proxy connects.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.errors import Forbidden
from apps.proxy import exposure, sessions
from apps.proxy.adapters import Adapter
from apps.proxy.models import ProxyPool, ProxyRoute
from apps.proxy.paths import base_path

SCOPES = [s.value for s in ProxyPool.Scope]


# --- pools ------------------------------------------------------------------------


def desired_scope(project) -> str:
    tenant_policy = project.tenant.policy or {}
    return (project.policy or {}).get("proxy.scope") or tenant_policy.get("proxy.default_scope", "shared")


def allowed_scopes(tenant) -> list[str]:
    return list((tenant.policy or {}).get("proxy.allowed_scopes", ["shared"]))


def select_pool(instance) -> ProxyPool:
    """Steps 1-5: the project's wish within the tenant's policy, then the pool of that scope."""
    project, tenant = instance.project, instance.tenant
    scope = desired_scope(project)
    if scope not in allowed_scopes(tenant):
        raise Forbidden(
            f"Proxy scope {scope!r} is not allowed for this tenant.",
            code="proxy_scope_denied",
            details={"scope": scope, "allowed_scopes": allowed_scopes(tenant)},
        )
    owner = {
        "shared": {},
        "tenant": {"tenant": tenant},
        "project": {"tenant": tenant, "project": project},
        "app_instance": {"tenant": tenant, "project": project, "name": f"instance-{instance.pk}"},
    }[scope]
    pool = ProxyPool.objects.filter(scope=scope, status=ProxyPool.Status.ACTIVE, **owner).first()
    if pool is None:
        pool = _request_pool(scope, tenant, owner)
    return pool


def _request_pool(scope: str, tenant, owner: dict) -> ProxyPool:
    if scope == "shared":
        pool, _ = ProxyPool.objects.get_or_create(name="shared", defaults={"scope": scope})
        if pool.status != ProxyPool.Status.ACTIVE:
            raise Forbidden("The shared proxy pool is not active.", code="proxy_pool_unavailable")
        return pool
    limit_key = {"tenant": "proxy.max_tenant_pools", "project": "proxy.max_project_pools"}.get(scope)
    if limit_key:
        existing = ProxyPool.objects.filter(scope=scope, tenant=tenant).exclude(
            status=ProxyPool.Status.DELETED
        )
        if existing.count() >= int((tenant.policy or {}).get(limit_key, 1)):
            raise Forbidden(
                f"The tenant has no {scope} proxy pool left ({limit_key}).", code="proxy_pool_limit"
            )
    name = owner.pop("name", None) or f"{scope}-{(owner.get('project') or tenant).pk}"
    # One data plane serves every pool here; a pool is the unit of limits and hostname.
    return ProxyPool.objects.create(name=name, scope=scope, status=ProxyPool.Status.ACTIVE, **owner)


# --- routes -----------------------------------------------------------------------


def _limits(adapter: Adapter, pool: ProxyPool, tenant) -> dict:
    tenant_policy = tenant.policy or {}

    def lowest(*values):
        return min(int(v) for v in values if v is not None)

    return {
        "per_instance": lowest(
            adapter.max_connections_per_instance,
            pool.limits.get("per_instance"),
            tenant_policy.get("proxy.max_connections_per_instance"),
            settings.PROXY_MAX_CONNECTIONS_PER_INSTANCE,
        ),
        "per_user": lowest(
            adapter.max_connections_per_user,
            pool.limits.get("per_user"),
            tenant_policy.get("proxy.max_connections_per_user"),
            settings.PROXY_MAX_CONNECTIONS_PER_USER,
        ),
    }


def idle_timeout(adapter: Adapter, instance) -> int:
    """The launcher's ``idle_minutes`` parameter when the app offers one, else the
    manifest's ``idle_timeout_seconds``, capped by the tenant's policy and the platform."""
    tenant_policy = instance.tenant.policy or {}
    cap = int(tenant_policy.get("proxy.max_idle_timeout_seconds", settings.PROXY_IDLE_TIMEOUT_SECONDS))
    default = int(tenant_policy.get("proxy.default_idle_timeout_seconds", cap))
    minutes = instance.parameters.get("idle_minutes")
    wish = minutes * 60 if isinstance(minutes, int) else adapter.idle_timeout_seconds
    return min(wish or default, cap)


def public_url(pool: ProxyPool, mode: str, slug: str, instance_id, endpoint_name: str) -> str:
    issuer = urlsplit(settings.ISSUER)
    if mode == ProxyRoute.Mode.SUBDOMAIN:
        port = f":{issuer.port}" if issuer.port else ""
        return f"{issuer.scheme}://{slug}.{pool.hostname or settings.APPS_DOMAIN}{port}/"
    host = f"{issuer.scheme}://{pool.hostname}" if pool.hostname else settings.ISSUER
    return host + base_path(instance_id, endpoint_name)


def plan(instance, manifest: dict, route_mode: str | None) -> list[ProxyRoute]:
    """Steps 6-7 at launch: one pending route per proxied endpoint, bound to its pool."""
    if route_mode is None:
        return []
    pool = select_pool(instance)
    planned = []
    for endpoint in exposure.proxied_endpoints(manifest):
        adapter = Adapter.from_endpoint(endpoint)
        slug = f"{endpoint['name']}-{instance.pk.hex[:12]}"
        planned.append(
            ProxyRoute.objects.create(
                instance=instance,
                endpoint_name=endpoint["name"],
                pool=pool,
                mode=route_mode,
                slug=slug,
                public_url=public_url(pool, route_mode, slug, instance.pk, endpoint["name"]),
                policy={
                    "adapter": adapter.as_dict(),
                    "limits": _limits(adapter, pool, instance.tenant),
                    "idle_timeout_seconds": idle_timeout(adapter, instance),
                    "embedded": instance.ui_mode == exposure.EMBEDDED,
                },
            )
        )
    return planned


def sync(instance) -> None:
    """Step 8: follow the instance. Active while it runs with a reported upstream,
    removed otherwise; sessions on it are re-checked at once."""
    running = instance.state == "running"
    endpoints = {e.name: e for e in instance.endpoints.all()}
    for route in instance.proxy_routes.all():
        endpoint = endpoints.get(route.endpoint_name)
        if running and endpoint and endpoint.port:
            status, reason = ProxyRoute.Status.ACTIVE, ""
            host, port = endpoint.host, endpoint.port
        else:
            status = (
                ProxyRoute.Status.PENDING
                if instance.state in ("requested", "starting")
                else (ProxyRoute.Status.REMOVED)
            )
            reason = instance.state_reason or f"the app is {instance.state}"
            host, port = "", None
        if (route.status, route.upstream_host, route.upstream_port) != (status, host, port):
            route.status, route.status_reason = status, reason[:255]
            route.upstream_host, route.upstream_port = host, port
            route.save(
                update_fields=["status", "status_reason", "upstream_host", "upstream_port", "updated_at"]
            )
    transaction.on_commit(lambda: sessions.invalidate_instance(instance.pk))


def reconcile() -> int:
    """Stale routes: active while their instance no longer runs, or not active while
    it does (a transition that crashed half-way); each is brought back in line."""
    from apps.runtime.selectors import instances

    stale = (
        instances()
        .filter(
            Q(
                state="running",
                proxy_routes__status__in=[ProxyRoute.Status.PENDING, ProxyRoute.Status.REMOVED],
            )
            | (~Q(state="running") & Q(proxy_routes__status=ProxyRoute.Status.ACTIVE))
        )
        .distinct()
    )
    fixed = 0
    for instance in stale:
        with transaction.atomic():
            sync(instance)
        fixed += 1
    return fixed


def first_route(instance) -> ProxyRoute | None:
    """The route the workload shell opens: the first proxied endpoint's."""
    return instance.proxy_routes.order_by("endpoint_name").first()


def first_endpoints(instances) -> dict:
    """The endpoint ``first_route`` opens, for each of ``instances`` that has a route,
    by instance pk (one query, for lists)."""
    found: dict = {}
    rows = (
        ProxyRoute.objects.filter(instance__in=instances)
        .order_by("instance_id", "endpoint_name")
        .values_list("instance_id", "endpoint_name")
    )
    for instance_id, endpoint_name in rows:
        found.setdefault(instance_id, endpoint_name)
    return found


def route_for(instance, endpoint_name: str) -> ProxyRoute | None:
    return instance.proxy_routes.filter(endpoint_name=endpoint_name).select_related("pool").first()


def touch(route_id, when=None) -> None:
    """Last activity on a route and its instance (the proxy calls this at most every few seconds)."""
    from apps.runtime.services import record_activity

    when = when or timezone.now()
    route = ProxyRoute.objects.filter(pk=route_id).only("instance_id").first()
    if route is None:
        return
    ProxyRoute.objects.filter(pk=route_id).update(last_activity_at=when)
    record_activity(route.instance_id, when)
