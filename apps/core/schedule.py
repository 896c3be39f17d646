BEAT_SCHEDULE = {
    "purge-idempotency-records": {"task": "apps.core.tasks.purge_idempotency_records", "schedule": 3600.0},
}
