"""Writing the append-only audit trail.

Services call ``record`` for every privileged action and every denied access.
The actor is any object with ``audit_actor`` and ``audit_actor_type``
(a ``Principal``), or ``None`` for the platform itself (tasks, beat).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from django.core.cache import cache

from apps.core import correlation, counters
from apps.core.models import AuditEvent

logger = logging.getLogger("gpuaas.audit")
auth_logger = logging.getLogger("gpuaas.auth")
_source_ip: ContextVar[str | None] = ContextVar("source_ip", default=None)

SUCCESS = AuditEvent.Outcome.SUCCESS
DENIED = AuditEvent.Outcome.DENIED
FAILURE = AuditEvent.Outcome.FAILURE


def bind_source_ip(ip: str | None):
    return _source_ip.set(ip)


def unbind_source_ip(token) -> None:
    _source_ip.reset(token)


def record(
    actor: Any,
    action: str,
    *,
    target: Any = None,
    target_type: str = "",
    target_id: str = "",
    tenant_id=None,
    project_id=None,
    outcome: str = SUCCESS,
    details: dict | None = None,
    source_ip: str | None = None,
) -> AuditEvent:
    if target is not None:
        target_type = target_type or target._meta.model_name
        target_id = target_id or str(target.pk)
        tenant_id = tenant_id or _tenant_of(target)
        project_id = project_id or _project_of(target)
    event = AuditEvent.objects.create(
        actor=getattr(actor, "audit_actor", None) or "platform",
        actor_type=getattr(actor, "audit_actor_type", None) or "system",
        action=action,
        target_type=target_type,
        target_id=target_id,
        tenant_id=tenant_id,
        project_id=project_id,
        outcome=outcome,
        correlation_id=correlation.get(),
        source_ip=source_ip or _source_ip.get(),
        details=details or {},
    )
    logger.info(
        "audit %s %s %s",
        event.action,
        event.outcome,
        event.target_id,
        extra={"audit_actor": event.actor, "audit_outcome": event.outcome},
    )
    return event


def _tenant_of(obj) -> Any:
    if obj._meta.model_name == "tenant":
        return obj.pk
    return getattr(obj, "tenant_id", None)


def _project_of(obj) -> Any:
    if obj._meta.model_name == "project":
        return obj.pk
    return getattr(obj, "project_id", None)


# --- unauthenticated refusals, counted then summarised (decision 0031) -----------
# Anyone can send a bad client secret or bootstrap token: one audit row each would
# turn a flood into a database write flood. Each refusal is logged and counted in
# the shared cache per minute and per (action, source, target, reason); a periodic
# task writes one row per such key with its count. The number of keys a minute may
# create is bounded: past it, refusals are counted per (action, reason) only.

DENIED_WINDOW_SECONDS = 60
DENIED_KEYS_PER_WINDOW = 1000
DENIED_LOOKBACK_WINDOWS = 10  # a missed beat still summarises the last ten minutes
DENIED_GRACE_SECONDS = 5  # a window is summarised this long after it ends
_DENIED_TTL = DENIED_WINDOW_SECONDS * (DENIED_LOOKBACK_WINDOWS + 5)


class _Anonymous:
    audit_actor = "anonymous"
    audit_actor_type = "anonymous"


def _denied_key(window: int, *parts: object) -> str:
    return ":".join(["audit-denied", str(window), *map(str, parts)])


def count_denied(
    action: str,
    *,
    reason: str,
    target_type: str = "",
    target_id: str = "",
    tenant_id=None,
    project_id=None,
) -> None:
    """Log and count an unauthenticated refusal; ``summarise_denied`` audits the counts."""
    auth_logger.warning(
        "%s refused: %s (%s %r)",
        action,
        reason,
        target_type,
        target_id[:255],
        extra={"source_ip": _source_ip.get()},
    )
    window = int(time.time() // DENIED_WINDOW_SECONDS)
    entry = {
        "action": action,
        "reason": reason,
        "target_type": target_type,
        "target_id": target_id[:255],
        "tenant_id": str(tenant_id) if tenant_id else None,
        "project_id": str(project_id) if project_id else None,
        "source_ip": _source_ip.get(),
    }
    if (cache.get(_denied_key(window, "slots")) or 0) >= DENIED_KEYS_PER_WINDOW:
        # Many sources or made-up client ids this minute: one count for them all.
        entry.update(target_id="*", tenant_id=None, project_id=None, source_ip=None)
    digest = hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()[:32]
    if counters.increment(_denied_key(window, "count", digest), _DENIED_TTL) == 1:
        slot = counters.increment(_denied_key(window, "slots"), _DENIED_TTL)
        entry.update(digest=digest, correlation_id=correlation.get())
        cache.set(_denied_key(window, "slot", slot), json.dumps(entry), timeout=_DENIED_TTL)


def summarise_denied(now: float | None = None) -> int:
    """Write the counts of the minutes that ended into the audit log, one row per key.

    Each minute is claimed in the cache first, so two beats (or a retried task)
    never write it twice. Returns the number of rows written.
    """
    now = time.time() if now is None else now
    last = int((now - DENIED_GRACE_SECONDS) // DENIED_WINDOW_SECONDS)  # the first unfinished window
    written = 0
    for window in range(last - DENIED_LOOKBACK_WINDOWS, last):
        slots = cache.get(_denied_key(window, "slots")) or 0
        if not slots or not cache.add(_denied_key(window, "summarised"), 1, timeout=_DENIED_TTL):
            continue
        entries = cache.get_many([_denied_key(window, "slot", n) for n in range(1, slots + 1)])
        entries = [json.loads(value) for value in entries.values()]
        counts = cache.get_many([_denied_key(window, "count", e["digest"]) for e in entries])
        start = datetime.fromtimestamp(window * DENIED_WINDOW_SECONDS, tz=UTC)
        end = datetime.fromtimestamp((window + 1) * DENIED_WINDOW_SECONDS, tz=UTC)
        for entry in entries:
            record(
                _Anonymous,
                entry["action"],
                target_type=entry["target_type"],
                target_id=entry["target_id"],
                tenant_id=entry["tenant_id"],
                project_id=entry["project_id"],
                outcome=DENIED,
                source_ip=entry["source_ip"],
                details={
                    "reason": entry["reason"],
                    "count": counts.get(_denied_key(window, "count", entry["digest"]), 1),
                    "from": start.isoformat(),
                    "to": end.isoformat(),
                    "first_correlation_id": entry["correlation_id"],
                },
            )
            written += 1
    return written
