from celery import shared_task
from django.conf import settings

from apps.monitoring import services
from apps.monitoring.alerts import evaluation
from apps.monitoring.alerts import services as alerts
from apps.monitoring.metrics import embedded


@shared_task(name="apps.monitoring.tasks.write_scrape_targets")
def write_scrape_targets() -> bool:
    # Without a metrics database nobody scrapes: the agents report to the embedded store.
    return bool(settings.METRICS_URL) and services.write_scrape_targets()


@shared_task(name="apps.monitoring.tasks.rollup_metrics")
def rollup_metrics() -> None:
    if not settings.METRICS_URL:
        embedded.rollup()


@shared_task(name="apps.monitoring.tasks.prune_metrics")
def prune_metrics() -> int:
    """The monitoring tables' hourly trim: resolved alerts past their retention, and
    the embedded store's readings past theirs (a metrics database keeps its own)."""
    return alerts.delete_resolved() + (0 if settings.METRICS_URL else embedded.prune())


@shared_task(name="apps.monitoring.tasks.measure_storage_latency")
def measure_storage_latency() -> int:
    return services.measure_storage_latency()


@shared_task(name="apps.monitoring.tasks.evaluate_alerts", expires=settings.ALERT_EVALUATION_SECONDS)
def evaluate_alerts() -> int | None:
    """One round of every alert rule; how many alerts fired or resolved (None: another
    worker's round was still running)."""
    done = evaluation.evaluate()
    return None if done is None else len(done.fired) + len(done.resolved)
