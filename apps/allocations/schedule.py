BEAT_SCHEDULE = {
    "reconcile-allocations": {"task": "apps.allocations.tasks.reconcile_allocations", "schedule": 30.0},
}
