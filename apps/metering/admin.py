from __future__ import annotations

from django.contrib import admin

from apps.core.admin import AuditedModelAdmin
from apps.metering.models import Rate


@admin.register(Rate)
class RateAdmin(AuditedModelAdmin):
    """Prices of metered resources in the billing export; node-hours are priced per
    flavor (Catalog > Flavors)."""

    list_display = ("resource", "rate", "updated_at")
    readonly_fields = ("created_at", "updated_at")
