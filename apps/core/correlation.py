"""The correlation id of the current request or task.

Accepted from ``X-Correlation-ID`` when well formed, generated otherwise, kept in
a context variable so logs, audit events, Celery tasks (as a task header) and
outbound HTTP calls of the same unit of work carry it.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

HEADER = "X-Correlation-ID"
_VALID = re.compile(r"^[A-Za-z0-9._-]{8,128}$")
_current: ContextVar[str | None] = ContextVar("correlation_id", default=None)


def new_id() -> str:
    return uuid.uuid4().hex


def accept(value: str | None) -> str:
    return value if value and _VALID.match(value) else new_id()


def get() -> str:
    """The current id; work started outside a request gets its own."""
    value = _current.get()
    if value is None:
        value = new_id()
        _current.set(value)
    return value


def peek() -> str | None:
    return _current.get()


def set(value: str | None):  # noqa: A001 - mirrors ContextVar.set
    return _current.set(value)


def reset(token) -> None:
    _current.reset(token)


def outbound_headers() -> dict[str, str]:
    return {HEADER: get()}


def connect_celery_signals() -> None:
    from celery.signals import before_task_publish, task_postrun, task_prerun

    @before_task_publish.connect(weak=False)
    def _stamp(headers=None, **kwargs):
        if headers is not None and not headers.get("correlation_id"):
            headers["correlation_id"] = get()

    @task_prerun.connect(weak=False)
    def _enter(task=None, **kwargs):
        request = getattr(task, "request", None)
        value = getattr(request, "correlation_id", None) if request else None
        task._correlation_token = set(accept(value))

    @task_postrun.connect(weak=False)
    def _leave(task=None, **kwargs):
        token = getattr(task, "_correlation_token", None)
        if token is not None:
            try:
                reset(token)
            except ValueError:  # reset from another context (eager tasks inside a request)
                set(None)
