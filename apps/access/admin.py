"""Operators see access credentials and project secrets by name, public key and date;
private keys and secret values stay in the secrets store and reach no admin page. For
SSH access: the keys on allocations (owner, state, and an action to take keys off a
node), users' profile keys, and what each node's agent reported about its SSH server.
Web terminal: sessions, read-only, with an action that ends a live one (through
``terminals.end_by_operator``, audited); each project's terminal policy."""

from __future__ import annotations

from django.contrib import admin

from apps.access import services, terminals
from apps.access.models import (
    AccessCredential,
    AuthorizedKey,
    NodeSshHost,
    ProjectSecret,
    TerminalPolicy,
    TerminalSession,
    UserSshKey,
)
from apps.core.admin import AuditedModelAdmin, ReadOnlyModelAdmin
from apps.tenancy.admin import apply_as_operator

# --- Secrets custody ------------------------------------------------------------------


@admin.register(AccessCredential)
class AccessCredentialAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "project", "fingerprint", "created_by", "created_at")
    list_select_related = ("project__tenant",)
    list_filter = ("tenant",)
    search_fields = ("name", "fingerprint", "project__project_id")
    fields = ("name", "tenant", "project", "fingerprint", "public_key", "created_by", "created_at")
    readonly_fields = fields


@admin.register(ProjectSecret)
class ProjectSecretAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "project", "created_by", "created_at", "updated_at")
    list_select_related = ("project__tenant",)
    list_filter = ("tenant",)
    search_fields = ("name", "project__project_id")
    fields = ("name", "tenant", "project", "created_by", "created_at", "updated_at")
    readonly_fields = fields


# --- Runtime users and SSH keys ------------------------------------------------------


@admin.register(AuthorizedKey)
class AuthorizedKeyAdmin(ReadOnlyModelAdmin):
    list_display = (
        "fingerprint",
        "allocation",
        "node",
        "purpose",
        "owner",
        "state",
        "created_at",
        "applied_at",
    )
    list_filter = ("state", "purpose")
    search_fields = ("=id", "fingerprint", "owner", "allocation__node__hostname", "=allocation__id")
    list_select_related = ("allocation__node", "allocation__project")
    fields = (
        "id",
        "allocation",
        "fingerprint",
        "public_key",
        "comment",
        "purpose",
        "owner",
        "owner_user",
        "owner_service_account",
        "state",
        "created_at",
        "applied_at",
    )
    readonly_fields = fields
    actions = ["remove_keys"]

    @admin.display(description="node")
    def node(self, key):
        return key.allocation.node.hostname

    @admin.action(description="Take the selected keys off their nodes", permissions=["operate"])
    def remove_keys(self, request, queryset):
        apply_as_operator(
            self,
            request,
            queryset.select_related("allocation__node"),
            lambda operator, key: services.remove_key(operator, key.allocation, key.pk),
            done="Removing",
        )


@admin.register(UserSshKey)
class UserSshKeyAdmin(ReadOnlyModelAdmin):
    list_display = ("user", "name", "fingerprint", "created_at")
    search_fields = ("fingerprint", "user__username", "name")
    list_select_related = ("user",)
    fields = ("id", "user", "name", "fingerprint", "public_key", "created_at")
    readonly_fields = fields


@admin.register(NodeSshHost)
class NodeSshHostAdmin(ReadOnlyModelAdmin):
    list_display = ("node", "user", "port", "reported_at")
    search_fields = ("node__hostname",)
    list_select_related = ("node",)
    fields = ("node", "user", "port", "host_keys", "reported_at")
    readonly_fields = fields


# --- Web terminal ---------------------------------------------------------------------


@admin.register(TerminalSession)
class TerminalSessionAdmin(ReadOnlyModelAdmin):
    list_display = (
        "created_at",
        "username",
        "runtime_user",
        "node",
        "project",
        "state",
        "ended_at",
        "end_reason",
    )
    list_filter = ("state",)
    search_fields = ("=id", "username", "node__hostname", "=allocation__id")
    list_select_related = ("node", "project__tenant")
    fields = (
        "id",
        "allocation",
        "tenant",
        "project",
        "node",
        "username",
        "runtime_user",
        "state",
        "cols",
        "rows",
        "idle_timeout_seconds",
        "max_duration_seconds",
        "last_input_at",
        "created_at",
        "ended_at",
        "end_reason",
        "exit_code",
        "output_bytes",
        "recorded_bytes",
        "recording_chars",
        "recording_truncated",
        "recording_deleted",
    )
    readonly_fields = fields
    actions = ["end_sessions"]

    @admin.action(description="End the selected terminal sessions", permissions=["operate"])
    def end_sessions(self, request, queryset):
        apply_as_operator(
            self,
            request,
            queryset,
            terminals.end_by_operator,
            done="Ended",
            already=(lambda session: not session.is_live, "Already ended"),
        )


@admin.register(TerminalPolicy)
class TerminalPolicyAdmin(AuditedModelAdmin):  # retention decides when recordings are deleted
    list_display = ("project", "idle_timeout_seconds", "max_duration_seconds", "recording_retention_days")
    search_fields = ("project__name", "project__project_id")
    autocomplete_fields = ("project",)
