"""Operator surfaces: XID events (read-only; resolved through an audited action)."""

from __future__ import annotations

from django.contrib import admin

from apps.core.admin import ReadOnlyModelAdmin
from apps.monitoring import services
from apps.monitoring.alerts import admin as alerts_admin  # noqa: F401 (registers the alerting models)
from apps.monitoring.models import XidEvent
from apps.tenancy.admin import apply_as_operator_with_reason


def _label(event: XidEvent) -> str:
    return f"XID {event.code} on {event.node.hostname} GPU {event.gpu}"


@admin.register(XidEvent)
class XidEventAdmin(ReadOnlyModelAdmin):
    list_display = (
        "code",
        "severity",
        "description",
        "node",
        "gpu",
        "occurrences",
        "last_seen_at",
        "resolved_at",
    )
    list_filter = ("severity", "code", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("node__hostname", "uuid")
    search_help_text = "Node hostname or GPU UUID."
    list_select_related = ("node",)
    actions = ("resolve",)

    @admin.action(description="Resolve selected XID events", permissions=["operate"])
    def resolve(self, request, queryset):
        return apply_as_operator_with_reason(
            self,
            request,
            queryset.select_related("node"),
            services.resolve_xid,
            action="resolve",
            title="Resolve XID events",
            intro="Say what was done (GPU reset, node drained, RMA...). A later occurrence of the same "
            "error opens a new event.",
            submit="Resolve",
            done="Resolved",
            label=_label,
            already=(lambda event: not event.is_open, "Already resolved"),
        )
