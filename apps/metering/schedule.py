BEAT_SCHEDULE = {
    "sweep-quota-thresholds": {"task": "apps.metering.tasks.sweep_quota_thresholds", "schedule": 60.0},
}
