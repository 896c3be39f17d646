BEAT_SCHEDULE = {
    "access-end-expired-terminals": {"task": "apps.access.tasks.end_expired_terminals", "schedule": 60.0},
    "access-delete-expired-recordings": {
        "task": "apps.access.tasks.delete_expired_recordings",
        "schedule": 3600.0,
    },
}
