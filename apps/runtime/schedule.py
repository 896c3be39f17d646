BEAT_SCHEDULE = {
    "mark-silent-nodes-offline": {"task": "apps.runtime.tasks.mark_silent_nodes_offline", "schedule": 15.0},
    "expire-stale-agent-claims": {"task": "apps.runtime.tasks.expire_stale_claims", "schedule": 60.0},
}
