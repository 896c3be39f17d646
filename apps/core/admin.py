"""Operator surfaces for the core models, and the base every editable admin uses.

Admin edits are privileged actions like any other: ``AuditedModelAdmin`` writes
them to the audit trail next to Django's own ``LogEntry``. Records that must
never change (audit events, idempotency records) are read-only here.
"""

from __future__ import annotations

import json

from django.contrib import admin

from apps.core import audit
from apps.core.models import AuditEvent, IdempotencyRecord


class AdminActor:
    """The signed-in operator as an audit actor (what ``Principal`` offers, without its grants)."""

    audit_actor_type = "user"

    def __init__(self, user):
        self.audit_actor = user.get_username()


def _changes(message) -> list:
    if isinstance(message, str):
        return [message] if message else []
    return json.loads(json.dumps(message or [], default=str))


class AuditedModelAdmin(admin.ModelAdmin):
    def log_addition(self, request, obj, message):
        audit.record(
            AdminActor(request.user),
            f"admin.{obj._meta.model_name}.add",
            target=obj,
            details={"changes": _changes(message)},
        )
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        audit.record(
            AdminActor(request.user),
            f"admin.{obj._meta.model_name}.change",
            target=obj,
            details={"changes": _changes(message)},
        )
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        for obj in queryset:
            audit.record(
                AdminActor(request.user),
                f"admin.{obj._meta.model_name}.delete",
                target=obj,
                details={"object": str(obj)},
            )
        return super().log_deletions(request, queryset)


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """Viewable by operators with the view permission; never added, changed or deleted here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    list_display = (
        "occurred_at",
        "actor",
        "actor_type",
        "action",
        "outcome",
        "target_type",
        "target_id",
        "correlation_id",
    )
    list_filter = ("outcome", "actor_type", "action")
    search_fields = ("=correlation_id", "actor", "target_id")
    date_hierarchy = "occurred_at"
    fields = (
        "occurred_at",
        "actor",
        "actor_type",
        "action",
        "outcome",
        "target_type",
        "target_id",
        "tenant_id",
        "project_id",
        "correlation_id",
        "source_ip",
        "details",
    )
    readonly_fields = fields
    list_per_page = 50
    # The trail grows without bound: skip the unfiltered COUNT(*) on every page.
    show_full_result_count = False


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyModelAdmin):
    # The stored response body is left out: it can hold a one-time secret
    # (a created service account's client_secret), sealed at rest and never shown.
    list_display = ("created_at", "principal", "key", "response_status")
    list_filter = ("response_status",)
    search_fields = ("principal", "=key")
    date_hierarchy = "created_at"
    fields = ("created_at", "principal", "key", "request_hash", "response_status")
    readonly_fields = fields
    show_full_result_count = False
