"""Operator surfaces for alerting: the rules (threshold, ``for`` and on/off editable,
audited as every admin edit), the fleet's alerts (read-only) and the subscriptions
(read-only, with a test send; their secrets appear nowhere)."""

from __future__ import annotations

from django.contrib import admin

from apps.core.admin import AuditedModelAdmin, ReadOnlyModelAdmin
from apps.monitoring.alerts import subscriptions
from apps.monitoring.models import Alert, AlertRule, AlertSubscription
from apps.tenancy.admin import apply_as_operator


@admin.register(AlertRule)
class AlertRuleAdmin(AuditedModelAdmin):
    list_display = ("name", "metric", "severity", "threshold", "for_seconds", "enabled", "description")
    list_editable = ("threshold", "for_seconds", "enabled")
    list_filter = ("metric", "severity", "enabled")
    fields = (
        "name",
        "metric",
        "severity",
        "threshold",
        "for_seconds",
        "enabled",
        "description",
        "updated_at",
    )
    readonly_fields = ("name", "metric", "severity", "description", "updated_at")

    # The rules are what the evaluator knows how to watch: shipped, never added or removed here.
    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Alert)
class AlertAdmin(ReadOnlyModelAdmin):
    list_display = (
        "started_at",
        "rule",
        "severity",
        "state",
        "hostname",
        "gpu",
        "value",
        "threshold",
        "tenant",
        "resolved_at",
        "inhibited",
    )
    list_filter = ("state", "severity", "rule", "inhibited")
    search_fields = ("hostname", "subject", "=id", "tenant__tenant_id")
    list_select_related = ("tenant", "rule")
    date_hierarchy = "created_at"
    list_per_page = 100
    show_full_result_count = False


@admin.register(AlertSubscription)
class AlertSubscriptionAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "tenant", "url", "severities", "created_by")
    list_select_related = ("tenant",)
    search_fields = ("url", "tenant__tenant_id")
    fields = ("id", "tenant", "url", "severities", "created_by", "created_at")
    readonly_fields = fields
    actions = ("test_send",)

    def has_test_send_permission(self, request):
        return request.user.has_perm("monitoring.view_alertsubscription")

    @admin.action(description="Send a test alert to the selected subscriptions", permissions=["test_send"])
    def test_send(self, request, queryset):
        apply_as_operator(
            self,
            request,
            list(queryset),
            lambda operator, subscription: subscriptions.test_send(operator, subscription.pk),
            done="Sent a test alert to",
            label=lambda subscription: subscription.url,
        )
