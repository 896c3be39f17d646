"""Operator surfaces: pools (hostname, limits, status) and the routes they serve."""

from django.contrib import admin

from apps.core.admin import AuditedModelAdmin, ReadOnlyInline, ReadOnlyModelAdmin
from apps.proxy.models import ProxyPool, ProxyRoute


class RouteInline(ReadOnlyInline):
    model = ProxyRoute
    fields = ("public_url", "instance", "endpoint_name", "status", "last_activity_at")
    readonly_fields = fields
    show_change_link = True


@admin.register(ProxyPool)
class ProxyPoolAdmin(AuditedModelAdmin):
    list_display = ("name", "scope", "tenant", "project", "status", "hostname")
    list_filter = ("scope", "status")
    search_fields = ("name", "hostname", "tenant__tenant_id")
    fields = ("name", "scope", "tenant", "project", "status", "hostname", "limits")
    autocomplete_fields = ("tenant", "project")
    inlines = [RouteInline]


@admin.register(ProxyRoute)
class ProxyRouteAdmin(ReadOnlyModelAdmin):
    list_display = ("public_url", "instance", "endpoint_name", "mode", "status", "pool", "last_activity_at")
    list_filter = ("status", "mode", "pool")
    search_fields = ("=id", "slug", "=instance__id", "upstream_host")
    list_select_related = ("instance", "pool")
    fields = (
        "id",
        "owner_type",
        "instance",
        "endpoint_name",
        "pool",
        "mode",
        "slug",
        "public_url",
        "upstream_host",
        "upstream_port",
        "status",
        "status_reason",
        "policy",
        "last_activity_at",
        "created_at",
        "updated_at",
    )
