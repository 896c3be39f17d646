"""Operator surfaces for metering: dated rates (added, never edited), the recorded
billing exports, corrections after an export, and the quota warnings raised."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseRedirect

from apps.core.admin import AuditedModelAdmin, ReadOnlyModelAdmin
from apps.core.errors import ApiError
from apps.metering import services
from apps.metering.models import BillingAdjustment, BillingExport, QuotaCrossing, Rate
from apps.tenancy import principal as principals


@admin.register(Rate)
class RateAdmin(AuditedModelAdmin):
    """Prices of metered resources in the billing export, each from its start on. A new
    price is a new rate: the past keeps the one it had. Node-hours are priced per
    flavor; before a flavor's first node-hour rate, its own price (Catalog > Flavors)."""

    list_display = ("resource", "flavor", "rate", "effective_from", "created_by")
    list_filter = ("resource",)
    fields = ("resource", "flavor", "rate", "effective_from")

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)


@admin.register(BillingExport)
class BillingExportAdmin(ReadOnlyModelAdmin):
    list_display = ("tenant", "period", "exported_by", "created_at", "sha256")
    list_filter = ("period",)
    search_fields = ("tenant__tenant_id",)
    list_select_related = ("tenant",)
    fields = ("tenant", "period", "exported_by", "created_at", "sha256", "body")
    readonly_fields = fields


@admin.register(BillingAdjustment)
class BillingAdjustmentAdmin(admin.ModelAdmin):
    """A correction of an exported month, listed with its reason in the tenant's next
    export; added through the service (checked and audited), never changed."""

    list_display = ("tenant", "period", "project", "amount", "reason", "created_by", "export")
    search_fields = ("tenant__tenant_id", "reason")
    list_select_related = ("tenant", "project", "export")
    fields = ("tenant", "project", "period", "amount", "reason")
    autocomplete_fields = ("tenant",)

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ApiError as exc:
            details = "; ".join(
                f"{field}: {' '.join(map(str, errors))}" for field, errors in exc.details.items()
            )
            self.message_user(request, f"Not recorded: {exc.message} {details}".strip(), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request, obj, form, change):
        recorded = services.record_adjustment(
            principals.for_user(request.user),
            obj.tenant,
            month=f"{obj.period:%Y-%m}",
            amount=obj.amount,
            reason=obj.reason,
            project_id=obj.project.project_id if obj.project else None,
        )
        obj.pk, obj.created_at, obj.created_by = recorded.pk, recorded.created_at, recorded.created_by
        obj._state.adding = False


@admin.register(QuotaCrossing)
class QuotaCrossingAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "tenant", "resource", "level", "percent", "used", "limit", "cleared_at")
    list_filter = ("level", "resource")
    search_fields = ("tenant__tenant_id",)
    list_select_related = ("tenant",)
    fields = ("created_at", "tenant", "resource", "level", "percent", "used", "limit", "cleared_at")
    readonly_fields = fields
