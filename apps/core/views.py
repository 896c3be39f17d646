from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.core import metrics

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


@require_GET
@never_cache
def prometheus_metrics(request):
    return HttpResponse(metrics.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8")
