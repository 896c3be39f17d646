from __future__ import annotations

import hmac
import ipaddress
import logging

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.core import metrics
from apps.core.errors import error_json

logger = logging.getLogger(__name__)


@require_GET
@never_cache
def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_cache() -> None:
    cache.set("readyz", "1", timeout=5)
    if cache.get("readyz") != "1":
        raise RuntimeError("cache did not return the value just written")


def _check_broker() -> None:
    # Read at call time, not from the Celery app's configuration (fixed when the
    # app was first used), so the probe reports the broker the settings name.
    url = settings.CELERY_BROKER_URL
    if not url or url.startswith("memory://"):
        return  # the embedded default's broker lives inside this process
    from gpuaas.celery import app

    # One attempt, no retry loop: a probe must answer fast, and the caller retries.
    with app.connection_for_write(url) as conn:
        conn.ensure_connection(max_retries=0, timeout=2)


@require_GET
@never_cache
def readyz(request):
    checks = {}
    for name, check in (("database", _check_database), ("cache", _check_cache), ("broker", _check_broker)):
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            logger.warning("readiness check %s failed: %s", name, exc.__class__.__name__)
            checks[name] = "unavailable"
    ready = all(value == "ok" for value in checks.values())
    response = JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )
    if not ready:
        response["Retry-After"] = "5"
    return response


def _from_loopback(request) -> bool:
    # REMOTE_ADDR is the peer, or the client a trusted proxy (FORWARDED_ALLOW_IPS) saw.
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR") or "")
    except ValueError:
        return False
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def _bearer_matches(request, token: str) -> bool:
    scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


@require_GET
@never_cache
def prometheus_metrics(request):
    """Open on loopback (a scraper beside the process); elsewhere a platform
    operator's session or ``Authorization: Bearer $GPUAAS_METRICS_TOKEN``: the
    series name tenants' routes and the platform's load."""
    if not (
        _from_loopback(request)
        or _bearer_matches(request, settings.METRICS_TOKEN)
        or getattr(request.user, "is_superuser", False)
    ):
        response = error_json(
            401, "unauthenticated", "Metrics need a platform operator or the metrics bearer token."
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(metrics.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8")
