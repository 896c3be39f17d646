"""Operator surfaces: pools (hostname, limits, status), the routes they serve, and
on the runtime's instances how an app's UI is shown (the proxy decides it)."""

from django.contrib import admin

from apps.core.admin import AuditedModelAdmin, ReadOnlyInline, ReadOnlyModelAdmin
from apps.proxy import services
from apps.proxy.models import ProxyPool, ProxyRoute
from apps.runtime.admin import AppInstanceAdmin
from apps.runtime.models import AppInstance
from apps.tenancy.admin import apply_as_operator


class RouteInline(ReadOnlyInline):
    model = ProxyRoute
    fields = ("public_url", "instance", "endpoint_name", "status", "last_activity_at")
    readonly_fields = fields
    show_change_link = True


@admin.register(ProxyPool)
class ProxyPoolAdmin(AuditedModelAdmin):
    list_display = ("name", "scope", "tenant", "project", "status", "hostname")
    list_select_related = ("tenant", "project__tenant")
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
    list_select_related = ("instance__project", "pool")
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


admin.site.unregister(AppInstance)


@admin.register(AppInstance)
class ProxiedAppInstanceAdmin(AppInstanceAdmin):
    actions = [*AppInstanceAdmin.actions, "ui_embedded", "ui_link_out", "ui_native", "ui_platform_decides"]

    def _ui_mode(self, request, queryset, override: str, done: str):
        queryset = queryset.select_related("app_version")
        apply_as_operator(
            self, request, queryset, lambda op, i: services.set_ui_mode(op, i, override), done=done
        )

    @admin.action(
        description="App UI: embed in the workload shell (when the app allows it)", permissions=["operate"]
    )
    def ui_embedded(self, request, queryset):
        self._ui_mode(request, queryset, "embedded", "Set to embed")

    @admin.action(description="App UI: open in its own tab", permissions=["operate"])
    def ui_link_out(self, request, queryset):
        self._ui_mode(request, queryset, "link_out", "Set to open in its own tab")

    @admin.action(description="App UI: show none", permissions=["operate"])
    def ui_native(self, request, queryset):
        self._ui_mode(request, queryset, "native", "Set to show no app UI")

    @admin.action(description="App UI: let the platform decide", permissions=["operate"])
    def ui_platform_decides(self, request, queryset):
        self._ui_mode(request, queryset, "", "Returned to the platform's decision")
