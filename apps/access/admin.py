"""Operator surfaces for host access.

Web terminal: sessions, read-only, with an action that ends a live one (through
``terminals.end_by_operator``, audited); each project's terminal policy."""

from __future__ import annotations

from django.contrib import admin

from apps.access import terminals
from apps.access.models import TerminalPolicy, TerminalSession
from apps.core.admin import ReadOnlyModelAdmin, apply_each
from apps.tenancy import principal as principals


@admin.register(TerminalSession)
class TerminalSessionAdmin(ReadOnlyModelAdmin):
    list_display = (
        "created_at",
        "username",
        "runtime_user",
        "node",
        "project",
        "state",
        "ended_at",
        "end_reason",
    )
    list_filter = ("state",)
    search_fields = ("=id", "username", "node__hostname", "=allocation__id")
    list_select_related = ("node", "project")
    fields = (
        "id",
        "allocation",
        "tenant",
        "project",
        "node",
        "username",
        "runtime_user",
        "state",
        "cols",
        "rows",
        "idle_timeout_seconds",
        "max_duration_seconds",
        "last_input_at",
        "created_at",
        "ended_at",
        "end_reason",
        "exit_code",
        "output_bytes",
        "recorded_bytes",
        "recording_chars",
        "recording_truncated",
        "recording_deleted",
    )
    readonly_fields = fields
    actions = ["end_sessions"]

    def has_operate_permission(self, request):
        return request.user.has_perm("access.change_terminalsession")

    @admin.action(description="End the selected terminal sessions", permissions=["operate"])
    def end_sessions(self, request, queryset):
        operator = principals.for_user(request.user)
        apply_each(
            self,
            request,
            queryset,
            lambda session: terminals.end_by_operator(operator, session),
            done="Ended",
            already=(lambda session: not session.is_live, "Already ended"),
        )


@admin.register(TerminalPolicy)
class TerminalPolicyAdmin(admin.ModelAdmin):
    list_display = ("project", "idle_timeout_seconds", "max_duration_seconds", "recording_retention_days")
    search_fields = ("project__name", "project__project_id")
    autocomplete_fields = ("project",)
