"""Operator surfaces for tenant storage (DDN directory, NodeMap, UFM PKey, quota):
read-only, provisioned by onboarding and changed through the storage service."""

from __future__ import annotations

from django.contrib import admin

from apps.core.admin import ReadOnlyInline, ReadOnlyModelAdmin
from apps.storage.models import StorageResize, TenantStorage


class StorageResizeInline(ReadOnlyInline):
    """Every size the directory had: storage is billed at each for its time."""

    model = StorageResize
    fields = ("resized_at", "from_gb", "to_gb", "resized_by")
    readonly_fields = fields


@admin.register(TenantStorage)
class TenantStorageAdmin(ReadOnlyModelAdmin):
    list_display = ("tenant", "path", "nodemap", "pkey", "quota_gb", "tier", "status", "updated_at")
    list_filter = ("status", "tier")
    search_fields = ("tenant__tenant_id", "tenant__name", "path", "nodemap", "=pkey")
    list_select_related = ("tenant",)
    fields = (
        "id",
        "tenant",
        "tier",
        "path",
        "nodemap",
        "pkey",
        "quota_gb",
        "status",
        "status_reason",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields
    inlines = (StorageResizeInline,)
