"""JSON log lines, each carrying the correlation id of its unit of work."""

from __future__ import annotations

import json
import logging
import time

from apps.core import correlation

# A record's own attributes; anything else on it came in ``extra`` and is logged.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "correlation_id",
    "request",
    "taskName",
}
_encode = json.JSONEncoder(default=str).encode


class CorrelationIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # Django's own request log ("django.request": 4xx/5xx) is written after the
        # middleware has left the request's context; the request still knows its id.
        request = getattr(record, "request", None)
        record.correlation_id = correlation.peek() or getattr(request, "correlation_id", None) or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, correlation id, and the
    record's ``extra`` fields. Written by hand: the proxy logs a line per request, and
    a general-purpose JSON formatter cost it more than the rest of its logging."""

    _second: tuple[int, str] = (0, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        # Formatted once a second: every line of that second shares it.
        second, stamp = self._second
        if int(record.created) != second:
            second = int(record.created)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(record.created))
            self._second = (second, stamp)
        return f"{stamp},{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "correlation_id": getattr(record, "correlation_id", None) or correlation.peek() or "-",
        }
        for name, value in record.__dict__.items():
            if name not in _RECORD_ATTRIBUTES:
                line.setdefault(name, value)
        request = record.__dict__.get("request")
        if request is not None and hasattr(request, "path"):
            # The request object's repr carries the query string; log method and path only.
            line.setdefault("method", getattr(request, "method", None))
            line.setdefault("path", request.path)
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return _encode(line)
