from celery import shared_task

from apps.runtime import agents


@shared_task(name="apps.runtime.tasks.mark_silent_nodes_offline")
def mark_silent_nodes_offline() -> int:
    return agents.mark_silent_nodes_offline()


@shared_task(name="apps.runtime.tasks.expire_stale_claims")
def expire_stale_claims() -> int:
    return agents.expire_stale_claims()
