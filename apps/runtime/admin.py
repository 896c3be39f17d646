"""Operator surfaces for app instances: read-only state, timeline and agent tasks,
with force-stop and decommission actions that go through the runtime services (the
platform proxy's admin adds how an app's UI is shown)."""

from __future__ import annotations

from django.contrib import admin

from apps.core.admin import ReadOnlyInline, ReadOnlyModelAdmin
from apps.runtime import services
from apps.runtime.models import AgentTask, AppInstance, InstanceEvent, Operation
from apps.tenancy.admin import apply_as_operator


class EventInline(ReadOnlyInline):
    model = InstanceEvent
    fields = ("occurred_at", "kind", "from_state", "to_state", "actor", "message")
    readonly_fields = fields
    ordering = ("-occurred_at",)


class TaskInline(ReadOnlyInline):
    model = AgentTask
    fields = ("created_at", "action", "status", "claimed_at", "finished_at", "error")
    readonly_fields = fields


@admin.register(AppInstance)
class AppInstanceAdmin(ReadOnlyModelAdmin):
    list_display = (
        "name",
        "app",
        "tenant",
        "project",
        "state",
        "ui_mode",
        "node",
        "created_by",
        "created_at",
    )
    list_filter = ("state", "app", "ui_mode")
    search_fields = ("=id", "name", "created_by", "allocation__node__hostname")
    list_select_related = ("app", "tenant", "project__tenant", "allocation__node")
    fields = (
        "id",
        "name",
        "app",
        "app_version",
        "tenant",
        "project",
        "allocation",
        "state",
        "state_reason",
        "ui_mode",
        "ui_mode_reason",
        "ui_mode_override",
        "parameters",
        "gpus",
        "shared_with_project",
        "owner",
        "created_by",
        "last_activity_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields
    inlines = [EventInline, TaskInline]
    actions = ["force_stop", "decommission"]

    @admin.display(description="Node")
    def node(self, instance):
        return instance.allocation.node.hostname

    def _change(self, request, queryset, action: str, done: str, already: str):
        """``services.change`` for each selected instance; those already there are named, not counted."""
        apply_as_operator(
            self,
            request,
            queryset,
            lambda op, i: services.change(op, i, action),
            done=done,
            already=(lambda instance: services.already(instance, action), already),
        )

    @admin.action(description="Force-stop the selected instances", permissions=["operate"])
    def force_stop(self, request, queryset):
        self._change(request, queryset, "stop", "Stopping", "Already stopped or stopping")

    @admin.action(description="Decommission the selected instances", permissions=["operate"])
    def decommission(self, request, queryset):
        self._change(
            request, queryset, "decommission", "Decommissioning", "Already deleted or decommissioning"
        )


@admin.register(Operation)
class OperationAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "kind", "state", "instance", "requested_by", "error")
    list_filter = ("state", "kind")
    search_fields = ("=id", "requested_by")
    list_select_related = ("instance__project",)
    fields = (
        "id",
        "kind",
        "instance",
        "tenant",
        "project",
        "state",
        "progress",
        "error",
        "requested_by",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields


@admin.register(AgentTask)
class AgentTaskAdmin(ReadOnlyModelAdmin):
    # The spec references secrets by name only, so it is safe to show.
    list_display = ("created_at", "node", "action", "status", "instance", "error")
    list_filter = ("status", "action")
    search_fields = ("=id", "node__hostname")
    list_select_related = ("node", "instance__project")
    fields = (
        "id",
        "node",
        "instance",
        "operation",
        "action",
        "status",
        "spec",
        "claimed_at",
        "finished_at",
        "error",
    )
    readonly_fields = fields
