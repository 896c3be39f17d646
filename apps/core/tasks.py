from celery import shared_task

from apps.core import idempotency


@shared_task(name="apps.core.tasks.purge_idempotency_records")
def purge_idempotency_records() -> int:
    return idempotency.purge_expired()
