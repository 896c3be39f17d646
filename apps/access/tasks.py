from celery import shared_task

from apps.access import recordings, terminals


@shared_task(name="apps.access.tasks.end_expired_terminals")
def end_expired_terminals() -> int:
    return terminals.end_expired()


@shared_task(name="apps.access.tasks.delete_expired_recordings")
def delete_expired_recordings() -> int:
    """Terminal retention: recordings past their project's retention, and ended
    sessions' rows past ``TERMINAL_SESSION_RETENTION_DAYS``."""
    return recordings.delete_expired()
