BEAT_SCHEDULE = {
    "mark-silent-nodes-offline": {"task": "apps.runtime.tasks.mark_silent_nodes_offline", "schedule": 15.0},
}
