"""Idle culling: an app nobody has used through the proxy for longer than its
idle timeout (the manifest's, capped by tenant policy) is stopped, and its event
says why. Activity is what the proxy records: HTTP requests and WebSocket traffic."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Max
from django.utils import timezone

from apps.core.errors import ApiError
from apps.proxy.models import ProxyRoute


def idle_since(instance):
    """The last proxied traffic, or when its routes last became active if there was none since."""
    activated = instance.proxy_routes.aggregate(at=Max("updated_at"))["at"]
    return max(t for t in (instance.last_activity_at, activated) if t is not None)


def cull_idle(now=None) -> list:
    from apps.runtime import selectors
    from apps.runtime import services as runtime

    now = now or timezone.now()
    stopped = []
    running = selectors.running_instances().filter(proxy_routes__status=ProxyRoute.Status.ACTIVE).distinct()
    for instance in running:
        timeout = max(r.policy.get("idle_timeout_seconds") or 0 for r in instance.proxy_routes.all())
        if not timeout or now - idle_since(instance) < timedelta(seconds=timeout):
            continue
        why = f"stopped after {human_duration(timeout)} without use through the platform proxy"
        try:
            runtime.change(runtime.SYSTEM, instance, "stop", why=why)
        except ApiError:
            continue  # it changed state meanwhile; the next run looks again
        stopped.append(instance.pk)
    return stopped


def human_duration(seconds: int) -> str:
    """``1 hour``, ``90 minutes``: how the shell and the events say an idle timeout."""
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    minutes = max(1, seconds // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
