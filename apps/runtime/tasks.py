from celery import shared_task

from apps.runtime import services


@shared_task(name="apps.runtime.tasks.mark_silent_nodes_offline")
def mark_silent_nodes_offline() -> int:
    return services.mark_silent_nodes_offline()
