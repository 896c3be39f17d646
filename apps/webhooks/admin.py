"""Operator surfaces for outbound webhooks: deliveries with their attempts, dead
letters, and replay through ``services.replay`` (policy and audit there).

The body is shown: it is the event exactly as signed and sent and holds no
secret. The signing secret is a setting and appears on no page.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html

from apps.core.admin import ReadOnlyModelAdmin
from apps.tenancy.admin import apply_as_operator
from apps.webhooks import services
from apps.webhooks.models import Delivery


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return (
            (Delivery.Status.PENDING, "Pending"),
            (Delivery.Status.DELIVERED, "Delivered"),
            (Delivery.Status.DEAD, "Dead letters"),
        )

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


def _label(delivery: Delivery) -> str:
    return f"{delivery.event_type} {delivery.event_id}"


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyModelAdmin):
    list_display = (
        "created_at",
        "event_type",
        "event_id",
        "url",
        "status",
        "attempts",
        "last_status_code",
        "short_error",
        "next_attempt_at",
    )
    list_filter = (StatusFilter, "event_type")
    search_fields = ("=event_id", "=correlation_id", "url")
    list_select_related = ("tenant",)
    date_hierarchy = "created_at"
    list_per_page = 100
    show_full_result_count = False
    fields = (
        "id",
        "event_type",
        "event_id",
        "url",
        "tenant",
        "correlation_id",
        "status",
        "attempts",
        "max_attempts",
        "next_attempt_at",
        "last_status_code",
        "last_error",
        "delivered_at",
        "created_at",
        "updated_at",
        "body_pretty",
    )
    readonly_fields = fields
    actions = ("replay",)

    @admin.display(description="Last error")
    def short_error(self, delivery):
        error = delivery.last_error
        return error if len(error) <= 80 else error[:79] + "…"

    @admin.display(description="Body (as signed and sent)")
    def body_pretty(self, delivery):
        try:
            text = json.dumps(json.loads(delivery.body), indent=2, sort_keys=True)
        except ValueError:
            text = delivery.body
        return format_html("<pre>{}</pre>", text)

    @admin.action(description="Replay selected dead letters", permissions=["operate"])
    def replay(self, request, queryset):
        selected = list(queryset)
        dead = [d for d in selected if d.status == Delivery.Status.DEAD]
        skipped = len(selected) - len(dead)
        if skipped:
            self.message_user(
                request, f"{skipped} selected delivery(ies) are not dead letters; left alone.", messages.INFO
            )
        apply_as_operator(
            self,
            request,
            dead,
            services.replay,
            done="Replayed",
            label=_label,
        )
