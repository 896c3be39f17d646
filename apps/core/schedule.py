BEAT_SCHEDULE = {
    "purge-idempotency-records": {"task": "apps.core.tasks.purge_idempotency_records", "schedule": 3600.0},
    "summarise-denied-requests": {"task": "apps.core.tasks.summarise_denied_requests", "schedule": 60.0},
}
