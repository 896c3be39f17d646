from celery import shared_task

from apps.core import audit, idempotency


@shared_task(name="apps.core.tasks.purge_idempotency_records")
def purge_idempotency_records() -> int:
    return idempotency.purge_expired()


@shared_task(name="apps.core.tasks.summarise_denied_requests")
def summarise_denied_requests() -> int:
    return audit.summarise_denied()
