"""Operator surfaces for tenancy: users and groups, tenants (with projects and quota),
projects, memberships, service accounts (revoke through the service), identities and
signing keys. No secret is ever rendered: service accounts show no secret
hash, signing keys no private key."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db.models import Count

from apps.core.admin import (
    AuditedModelAdmin,
    IsNullFilter,
    ReadOnlyInline,
    ReadOnlyModelAdmin,
    apply_each,
    apply_each_with_reason,
)
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.auth.passwords import AdminSignInForm
from apps.tenancy.models import (
    ExternalIdentity,
    Membership,
    Project,
    Quota,
    ServiceAccount,
    SigningKey,
    Tenant,
)


def apply_as_operator(modeladmin, request, objects, operation, **options) -> list:
    """``apply_each`` of ``operation(operator, obj)``: the signed-in operator acts with their
    own grants, and the service writes the audit event (or the denial) exactly as for the
    API and the portal. ``options`` are ``apply_each``'s."""
    operator = principals.for_user(request.user)
    return apply_each(modeladmin, request, objects, lambda obj: operation(operator, obj), **options)


def apply_as_operator_with_reason(modeladmin, request, queryset, operation, **options):
    """``apply_each_with_reason`` of ``operation(operator, obj, reason)``; the operator is
    worked out once a reason is posted. ``options`` are ``apply_each_with_reason``'s."""

    def operation_for(reason):
        operator = principals.for_user(request.user)
        return lambda obj: operation(operator, obj, reason)

    return apply_each_with_reason(modeladmin, request, queryset, operation_for, **options)


# /admin/login/ counts and limits failed sign-ins like the portal's login page.
admin.site.login_form = AdminSignInForm

# Users and groups carry platform roles (``is_superuser`` is platform_admin, groups hold
# permissions): their edits are audited like every other admin edit. The audit details
# name the changed fields, never a value, so no password or hash is written.
admin.site.unregister(get_user_model())
admin.site.unregister(Group)


@admin.register(get_user_model())
class AuditedUserAdmin(AuditedModelAdmin, UserAdmin):
    actions = ("lift_sign_in_lockout",)

    @admin.action(description="Let selected users sign in again (lift the lockout)", permissions=["change"])
    def lift_sign_in_lockout(self, request, queryset):
        apply_as_operator(
            self,
            request,
            queryset,
            services.lift_sign_in_lockout,
            done="Lifted the sign-in lockout of",
            label=lambda user: user.get_username(),
            already=(lambda user: not services.sign_in_locked(user.get_username()), "Not locked out"),
        )


@admin.register(Group)
class AuditedGroupAdmin(AuditedModelAdmin, GroupAdmin):
    pass


class ProjectInline(admin.TabularInline):
    model = Project
    fields = ("project_id", "name", "created_at")
    readonly_fields = ("created_at",)
    extra = 0
    show_change_link = True


class QuotaInline(admin.TabularInline):
    """A tenant's limits, edited on the tenant's page (changes are audited with the tenant's)."""

    model = Quota
    fields = ("resource", "limit")
    extra = 0
    ordering = ("resource",)


class MembershipInline(ReadOnlyInline):
    """Who has a role on the project (edit memberships on their own page)."""

    model = Membership
    fields = ("user", "role", "limit", "source", "created_at")
    readonly_fields = fields
    show_change_link = True


@admin.register(Tenant)
class TenantAdmin(AuditedModelAdmin):
    list_display = ("name", "tenant_id", "status", "tier", "project_count", "created_at")
    list_filter = ("status", "tier")
    search_fields = ("tenant_id", "name", "realm_name")
    # The status moves only through onboarding and the Suspend / Reactivate actions, which
    # end or give back the tenant's access and audit it with the reason.
    readonly_fields = ("id", "status", "status_reason", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("id", "tenant_id", "name", "realm_name", "tier")}),
        ("Lifecycle", {"fields": ("status", "status_reason")}),
        ("Policy", {"fields": ("policy",), "classes": ("collapse",)}),
        ("Timestamps", {"fields": ("created_at", "updated_at")}),
    )
    inlines = (ProjectInline, QuotaInline)
    actions = ("suspend", "reactivate")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(project_total=Count("projects"))

    @admin.action(description="Suspend selected tenants", permissions=["change"])
    def suspend(self, request, queryset):
        return apply_as_operator_with_reason(
            self,
            request,
            queryset,
            services.suspend_tenant,
            action="suspend",
            title="Suspend tenants",
            intro="Their users keep their reads (usage, bills, lists) and can still release allocations, "
            "stop and delete apps and remove keys. Nothing new is allocated, launched, started or added; "
            "their terminals and app sessions end and their SSH keys leave their nodes until they are "
            "reactivated. What they hold stays allocated and metered: release it explicitly if it must go. "
            "The reason is shown to the tenant's users.",
            submit="Suspend",
            done="Suspended",
            already=(lambda tenant: tenant.status == Tenant.Status.SUSPENDED, "Already suspended"),
        )

    @admin.action(description="Reactivate selected tenants", permissions=["change"])
    def reactivate(self, request, queryset):
        apply_as_operator(
            self,
            request,
            queryset,
            services.reactivate_tenant,
            done="Reactivated",
            already=(lambda tenant: tenant.status == Tenant.Status.ACTIVE, "Already active"),
        )

    @admin.display(description="Projects", ordering="project_total")
    def project_count(self, tenant):
        return tenant.project_total

    def get_readonly_fields(self, request, obj=None):
        # The CCP tenant id is the key CCP addresses the tenant by: fixed once onboarded.
        return (*self.readonly_fields, "tenant_id") if obj else self.readonly_fields

    def has_add_permission(self, request):
        # Tenants are onboarded through the service (CCP's POST /api/tenants or
        # bootstrap_demo) so their network, storage and quota are provisioned.
        return False


@admin.register(Project)
class ProjectAdmin(AuditedModelAdmin):
    list_display = ("name", "project_id", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("project_id", "name", "tenant__tenant_id", "tenant__name")
    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    readonly_fields = ("id", "created_at", "updated_at")
    inlines = (MembershipInline,)

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "tenant", "project_id") if obj else self.readonly_fields


@admin.register(Quota)
class QuotaAdmin(AuditedModelAdmin):
    list_display = ("tenant", "resource", "limit", "updated_at")
    list_filter = ("resource",)
    search_fields = ("tenant__tenant_id", "tenant__name", "resource")
    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at")


@admin.register(Membership)
class MembershipAdmin(AuditedModelAdmin):
    list_display = ("user", "role", "limit", "tenant", "project", "source", "created_at")
    list_filter = ("role", "limit", "source")
    search_fields = (
        "user__username",
        "tenant__tenant_id",
        "tenant__name",
        "project__project_id",
        "project__name",
    )
    list_select_related = ("user", "tenant", "project")
    autocomplete_fields = ("user", "tenant", "project")
    fields = ("user", "role", "limit", "tenant", "project", "source", "created_at", "updated_at")
    readonly_fields = ("source", "created_at", "updated_at")


class ActiveFilter(IsNullFilter):
    title = "status"
    parameter_name = "status"
    field = "revoked_at"
    when_null = ("active", "Active")
    when_set = ("revoked", "Revoked")


@admin.register(ServiceAccount)
class ServiceAccountAdmin(ReadOnlyModelAdmin):
    """Read-only but for revocation. Accounts are created where the secret can be
    shown once (portal, API, ``manage.py create_service_account``); the secret hash
    is never displayed."""

    list_display = (
        "name",
        "client_id",
        "role",
        "limit",
        "tenant",
        "project",
        "active",
        "revoked_at",
        "last_token_at",
        "created_at",
    )
    list_filter = (ActiveFilter, "role")
    search_fields = ("name", "=client_id", "created_by", "tenant__tenant_id", "project__project_id")
    list_select_related = ("tenant", "project")
    fields = (
        "id",
        "name",
        "client_id",
        "role",
        "limit",
        "tenant",
        "project",
        "created_by",
        "created_at",
        "revoked_at",
        "last_token_at",
    )
    readonly_fields = fields
    actions = ("revoke",)

    @admin.display(boolean=True, description="Active")
    def active(self, account):
        return account.is_active

    @admin.action(description="Revoke selected service accounts", permissions=["operate"])
    def revoke(self, request, queryset):
        apply_as_operator(
            self,
            request,
            queryset,
            services.revoke_service_account,
            done="Revoked",
            label=lambda account: account.name,
            already=(lambda account: not account.is_active, "Already revoked"),
        )


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(AuditedModelAdmin):
    list_display = ("user", "issuer", "subject", "created_at")
    list_filter = ("issuer",)
    search_fields = ("user__username", "=subject", "issuer")
    list_select_related = ("user",)
    autocomplete_fields = ("user",)
    readonly_fields = ("created_at",)


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnlyModelAdmin):
    # The private key is in the secrets store, and reaches no page.
    list_display = ("kid", "created_at", "retired_at")
    fields = ("kid", "public_jwk", "created_at", "retired_at")
    readonly_fields = fields
