"""Waking the worker for a record already saved that a periodic sweeper also finds
(an allocation's reconciler, the webhooks' due-delivery sweep, tenant onboarding's
resume).

The wake-up is a Celery message sent after the record commits. When the broker is
down, the record stays as it was saved and the sweeper starts the work once the
broker is back: the request that saved it answers as it would have (202), rather
than 503 for work it did accept.
"""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)


def wake(task, *args: str) -> bool:
    """``task.delay(*args)``; False (logged) when the broker cannot take it."""
    try:
        task.delay(*args)
    except BrokerError as exc:
        logger.warning("broker unavailable (%s): %s left to its sweeper", type(exc).__name__, task.name)
        return False
    return True
