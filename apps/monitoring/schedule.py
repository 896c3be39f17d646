from django.conf import settings

BEAT_SCHEDULE = {
    "write-metrics-scrape-targets": {"task": "apps.monitoring.tasks.write_scrape_targets", "schedule": 15.0},
    "rollup-metrics": {"task": "apps.monitoring.tasks.rollup_metrics", "schedule": 60.0},
    "prune-metrics": {"task": "apps.monitoring.tasks.prune_metrics", "schedule": 3600.0},
    # Each round of the storage_latency rules reads the latest (their ``for`` is 0).
    "measure-storage-latency": {
        "task": "apps.monitoring.tasks.measure_storage_latency",
        "schedule": float(settings.ALERT_EVALUATION_SECONDS),
    },
    "evaluate-alert-rules": {
        "task": "apps.monitoring.tasks.evaluate_alerts",
        "schedule": float(settings.ALERT_EVALUATION_SECONDS),
    },
}
