"""JSON log lines, each carrying the correlation id of its unit of work."""

from __future__ import annotations

import logging

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

from apps.core import correlation


class CorrelationIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.correlation_id = correlation.peek() or "-"
        return True


class JsonFormatter(_BaseJsonFormatter):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s %(correlation_id)s")
        kwargs.setdefault("rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"})
        super().__init__(*args, **kwargs)

    def add_fields(self, log_record, record, message_dict):
        super().add_fields(log_record, record, message_dict)
        log_record.setdefault("correlation_id", getattr(record, "correlation_id", None) or correlation.peek() or "-")
