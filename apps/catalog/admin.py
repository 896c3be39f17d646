"""Operator surfaces for the catalog: flavors (GPU node SKUs), each with its fleet by state."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import format_html

from apps.allocations.models import Node
from apps.catalog import manifests
from apps.catalog import services as catalog_services
from apps.catalog.models import App, AppVersion, Entitlement, Flavor
from apps.core.admin import AuditedModelAdmin
from apps.tenancy import principal as principals

State = Node.State
# Columns of the flavor list: how many nodes of the flavor are in these states.
NODE_COLUMNS = {
    "available": (State.AVAILABLE,),
    "in_use": (State.PROVISIONING, State.ALLOCATED, State.RELEASING),
    "enrolling": (State.ENROLLING,),
    "out_of_service": (State.MAINTENANCE, State.FAILED, State.OFFLINE),
}


def _node_link(flavor, count: int, states=()):
    url = reverse("admin:allocations_node_changelist") + f"?flavor__id__exact={flavor.pk}"
    if len(states) == 1:
        url += f"&state__exact={states[0]}"
    return format_html('<a href="{}">{}</a>', url, count)


@admin.register(Flavor)
class FlavorAdmin(AuditedModelAdmin):
    list_display = (
        "name",
        "gpu_model",
        "gpus_per_node",
        "rate_per_node_hour",
        "nodes_total",
        "nodes_available",
        "nodes_in_use",
        "nodes_enrolling",
        "nodes_out_of_service",
    )
    search_fields = ("name", "gpu_model")
    readonly_fields = ("id", "created_at", "updated_at")

    def get_queryset(self, request):
        counts = {
            f"count_{column}": Count("nodes", filter=Q(nodes__state__in=states))
            for column, states in NODE_COLUMNS.items()
        }
        return super().get_queryset(request).annotate(count_total=Count("nodes"), **counts)

    def get_readonly_fields(self, request, obj=None):
        # Allocations and rate cards name the flavor: fixed once created.
        return (*self.readonly_fields, "name") if obj else self.readonly_fields

    @admin.display(description="Nodes", ordering="count_total")
    def nodes_total(self, flavor):
        return _node_link(flavor, flavor.count_total)

    @admin.display(description="Available", ordering="count_available")
    def nodes_available(self, flavor):
        return _node_link(flavor, flavor.count_available, NODE_COLUMNS["available"])

    @admin.display(description="In use", ordering="count_in_use")
    def nodes_in_use(self, flavor):
        return flavor.count_in_use

    @admin.display(description="Enrolling", ordering="count_enrolling")
    def nodes_enrolling(self, flavor):
        return _node_link(flavor, flavor.count_enrolling, NODE_COLUMNS["enrolling"])

    @admin.display(description="Out of service", ordering="count_out_of_service")
    def nodes_out_of_service(self, flavor):
        return flavor.count_out_of_service


class AppVersionForm(forms.ModelForm):
    """Publishing from the admin validates like the API: every schema error is listed."""

    class Meta:
        model = AppVersion
        fields = ("app", "version", "manifest")

    def clean_manifest(self):
        manifest = self.cleaned_data["manifest"]
        errors = manifests.validate(manifest)
        if errors:
            raise forms.ValidationError(errors)
        return manifest


class EntitlementInline(admin.TabularInline):
    model = Entitlement
    fields = ("tenant", "project", "granted_by", "created_at")
    readonly_fields = ("granted_by", "created_at")
    extra = 0


@admin.register(App)
class AppAdmin(AuditedModelAdmin):
    list_display = ("name", "slug", "publisher", "entitled_to_all", "latest")
    search_fields = ("slug", "name")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [EntitlementInline]

    @admin.display(description="latest version")
    def latest(self, app):
        version = app.latest_version()
        return version.version if version else "—"


@admin.register(AppVersion)
class AppVersionAdmin(AuditedModelAdmin):
    form = AppVersionForm
    list_display = ("app", "version", "status", "published_at", "published_by")
    list_filter = ("status", "app")
    readonly_fields = ("status", "published_at", "published_by")

    def save_model(self, request, obj, form, change):
        # Through the service: artifacts copied from the manifest, the publish audited.
        published = catalog_services.publish_version(
            principals.for_user(request.user), obj.app, version=obj.version, manifest=obj.manifest
        )
        obj.pk, obj.status = published.pk, published.status
