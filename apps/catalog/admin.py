"""Operator surfaces for the catalog: apps, their versions and entitlements. Flavors,
shown with their fleet, are in the allocations admin, which owns the nodes."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect

from apps.catalog import manifests
from apps.catalog import services as catalog_services
from apps.catalog.models import App, AppVersion, Entitlement
from apps.core.admin import AuditedModelAdmin
from apps.core.errors import ApiError, Forbidden
from apps.tenancy import policy
from apps.tenancy import principal as principals
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm


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
