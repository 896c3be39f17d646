BEAT_SCHEDULE = {
    "sweep-due-webhook-deliveries": {"task": "apps.webhooks.tasks.sweep_due_deliveries", "schedule": 15.0},
    "prune-webhook-deliveries": {"task": "apps.webhooks.tasks.prune_deliveries", "schedule": 3600.0},
}
