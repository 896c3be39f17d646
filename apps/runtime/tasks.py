from celery import shared_task

from apps.runtime import services


@shared_task(name="apps.runtime.tasks.mark_silent_nodes_offline")
def mark_silent_nodes_offline() -> int:
    return services.mark_silent_nodes_offline()


@shared_task(name="apps.runtime.tasks.expire_stale_claims")
def expire_stale_claims() -> int:
    return services.expire_stale_claims()
