"""JSON log lines, each carrying the correlation id of its unit of work."""

from __future__ import annotations

import logging

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

from apps.core import correlation


class CorrelationIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # Django's own request log ("django.request": 4xx/5xx) is written after the
        # middleware has left the request's context; the request still knows its id.
        request = getattr(record, "request", None)
        record.correlation_id = correlation.peek() or getattr(request, "correlation_id", None) or "-"
        return True


class JsonFormatter(_BaseJsonFormatter):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s %(correlation_id)s")
        kwargs.setdefault("rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"})
        super().__init__(*args, **kwargs)

    def add_fields(self, log_record, record, message_dict):
        super().add_fields(log_record, record, message_dict)
        log_record.setdefault(
            "correlation_id", getattr(record, "correlation_id", None) or correlation.peek() or "-"
        )
        request = log_record.pop("request", None)
        if request is not None and hasattr(request, "path"):
            # The request object's repr carries the query string; log method and path only.
            log_record.setdefault("method", getattr(request, "method", None))
            log_record.setdefault("path", request.path)
