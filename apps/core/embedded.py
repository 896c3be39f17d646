"""The embedded default's background services: a Celery worker on the memory
broker and Celery beat as threads of the web process (see DESIGN.md field
notes). Its local node agent is the runtime's (``apps.runtime.local_agent``)."""

from __future__ import annotations

import logging
import threading
import warnings

from django.conf import settings

logger = logging.getLogger(__name__)


def start_celery_worker() -> threading.Thread:
    from celery.exceptions import SecurityWarning

    from gpuaas.celery import app

    # Celery warns when its worker runs as root, aimed at shared worker hosts; here
    # it is a thread of the developer's own web process, which runs as whoever ran it.
    warnings.filterwarnings("ignore", category=SecurityWarning)

    def run():
        worker = app.Worker(
            pool="threads",
            concurrency=4,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            loglevel="WARNING",
            quiet=True,
        )
        worker.start()

    thread = threading.Thread(target=run, name="celery-worker", daemon=True)
    thread.start()
    return thread


def start_celery_beat() -> threading.Thread:
    from celery.beat import EmbeddedService

    from gpuaas.celery import app

    schedule = str(settings.VAR_DIR / "celerybeat-schedule")
    service = EmbeddedService(app, thread=True, schedule_filename=schedule)
    service.start()
    return service


def start_all() -> None:
    start_celery_worker()
    start_celery_beat()
    logger.info("embedded worker and beat started")
