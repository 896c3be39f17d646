BEAT_SCHEDULE = {
    "proxy-cull-idle": {"task": "apps.proxy.tasks.cull_idle", "schedule": 60.0},
    "proxy-reconcile-routes": {"task": "apps.proxy.tasks.reconcile_routes", "schedule": 120.0},
    "proxy-prune-sessions": {"task": "apps.proxy.tasks.prune_sessions", "schedule": 3600.0},
}
