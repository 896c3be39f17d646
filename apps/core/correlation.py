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
_VALID = re.compile(r"[A-Za-z0-9._-]{8,128}")  # fullmatch: "$" would let a trailing newline in
_current: ContextVar[str | None] = ContextVar("correlation_id", default=None)


def new_id() -> str:
    return uuid.uuid4().hex


def accept(value: str | None) -> str:
    return value if value and _VALID.fullmatch(value) else new_id()


def get() -> str:
    """The current id; work started outside a request gets its own."""
    value = _current.get()
    if value is None:
        value = new_id()
        _current.set(value)
    return value


def peek() -> str | None:
    return _current.get()


def set(value: str | None):  # named as ContextVar.set, which it mirrors
    return _current.set(value)


def reset(token) -> None:
    _current.reset(token)


def outbound_headers() -> dict[str, str]:
    return {HEADER: get()}


# Not "correlation_id": Celery already has a message property of that name (the
# task id), which wins over a header of the same name on the worker.
TASK_HEADER = "gpuaas_correlation_id"


def connect_celery_signals() -> None:
    from celery.signals import before_task_publish, task_postrun, task_prerun

    @before_task_publish.connect(weak=False)
    def _stamp(headers=None, **kwargs):
        if headers is not None and not headers.get(TASK_HEADER):
            # Outside a unit of work (beat, a shell) each message gets its own id
            # rather than one that would stick to the process.
            headers[TASK_HEADER] = peek() or new_id()

    @task_prerun.connect(weak=False)
    def _enter(task=None, **kwargs):
        request = getattr(task, "request", None)
        value = getattr(request, TASK_HEADER, None) if request else None
        # An eager task (tests) is never published, so it has no header: it runs in
        # the caller's context and keeps the caller's id.
        token = set(accept(value or peek()))
        if request is not None:
            # On the per-call request, not the task: one task object serves every thread.
            request.correlation_token = token

    @task_postrun.connect(weak=False)
    def _leave(task=None, **kwargs):
        request = getattr(task, "request", None)
        token = getattr(request, "correlation_token", None) if request else None
        if token is not None:
            try:
                reset(token)
            except ValueError:  # reset from another context
                set(None)
