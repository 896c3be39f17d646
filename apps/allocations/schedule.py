from django.conf import settings

BEAT_SCHEDULE = {
    "reconcile-allocations": {
        "task": "apps.allocations.tasks.reconcile_allocations",
        "schedule": settings.PIPELINE_RECONCILE_SECONDS,
    },
}
