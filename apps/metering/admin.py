from __future__ import annotations

from django.contrib import admin

from apps.core.admin import AuditedModelAdmin
from apps.metering.models import Quota, Rate


class QuotaInline(admin.TabularInline):
    """A tenant's limits, edited on the tenant's page (changes are audited with the tenant's)."""

    model = Quota
    fields = ("resource", "limit")
    extra = 0
    ordering = ("resource",)


@admin.register(Quota)
class QuotaAdmin(AuditedModelAdmin):
    list_display = ("tenant", "resource", "limit", "updated_at")
    list_filter = ("resource",)
    search_fields = ("tenant__tenant_id", "tenant__name", "resource")
    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at")


@admin.register(Rate)
class RateAdmin(AuditedModelAdmin):
    """Prices of metered resources in the billing export; node-hours are priced per
    flavor (Catalog > Flavors)."""

    list_display = ("resource", "rate", "updated_at")
    readonly_fields = ("created_at", "updated_at")
