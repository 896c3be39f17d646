"""Writing the append-only audit trail.

Services call ``record`` for every privileged action and every denied access.
The actor is any object with ``audit_actor`` and ``audit_actor_type``
(a ``Principal``), or ``None`` for the platform itself (tasks, beat).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from apps.core import correlation
from apps.core.models import AuditEvent

logger = logging.getLogger("gpuaas.audit")
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
        source_ip=_source_ip.get(),
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
