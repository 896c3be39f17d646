"""Operator surfaces for the catalog: flavors (GPU node SKUs), each with its fleet by state."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from apps.allocations.models import Node
from apps.catalog import manifests
from apps.catalog import services as catalog_services
from apps.catalog.models import App, AppVersion, Entitlement, Flavor
from apps.core.admin import AuditedModelAdmin
from apps.core.errors import ApiError, Forbidden
from apps.tenancy import policy
from apps.tenancy import principal as principals
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

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
    """Publishing from the admin validates like the API: every schema error is listed,
    and what ``publish_version`` would refuse is a form error, never a 500."""

    # Who publishes: set for each request by ``AppVersionAdmin.get_form``.
    principal: Principal | None = None

    class Meta:
        model = AppVersion
        fields = ("app", "version", "manifest")

    def clean_manifest(self):
        manifest = self.cleaned_data["manifest"]
        errors = manifests.validate(manifest)
        if errors:
            raise forms.ValidationError(errors)
        return manifest

    def clean(self):
        cleaned = super().clean()
        if self.instance.status == AppVersion.Status.DRAFT:
            try:
                # The service's own check, made here so the refusal is shown on the form;
                # the denial is audited (and kept: the admin's save never starts).
                policy.require_scope(self.principal, Perm.CATALOG_MANAGE)
            except Forbidden as exc:
                raise forms.ValidationError(
                    f"Not published: {exc.message} Publishing an app version needs a platform role."
                ) from None
        return cleaned


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

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        # Saving publishes the app and version named in the form: renaming an existing
        # row would publish another one beside it. Once published, a version is what
        # instances were launched from; a change is a new version.
        fixed = ["app", "version"]
        if obj.status != AppVersion.Status.DRAFT:
            fixed.append("manifest")
        return (*fixed, *self.readonly_fields)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.principal = principals.for_user(request.user)
        return form

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ApiError as exc:
            # A refusal the form could not foresee (another operator published this
            # version meanwhile): the save and its log entries are rolled back with it.
            self.message_user(request, f"Not published: {exc.message}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request, obj, form, change):
        if obj.status != AppVersion.Status.DRAFT:
            return  # nothing of a published version is editable: there is nothing to publish
        # Through the service: artifacts copied from the manifest, the publish audited.
        published = catalog_services.publish_version(
            form.principal, obj.app, version=obj.version, manifest=obj.manifest
        )
        obj.pk, obj.status = published.pk, published.status
