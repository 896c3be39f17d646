"""Operators see access credentials and project secrets by name, public key and date;
private keys and secret values stay in the secrets store and reach no admin page."""

from __future__ import annotations

from django.contrib import admin

from apps.access.models import AccessCredential, ProjectSecret
from apps.core.admin import ReadOnlyModelAdmin

# --- Secrets custody ------------------------------------------------------------------


@admin.register(AccessCredential)
class AccessCredentialAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "project", "fingerprint", "created_by", "created_at")
    list_select_related = ("project", "tenant")
    list_filter = ("tenant",)
    search_fields = ("name", "fingerprint", "project__project_id")
    fields = ("name", "tenant", "project", "fingerprint", "public_key", "created_by", "created_at")
    readonly_fields = fields


@admin.register(ProjectSecret)
class ProjectSecretAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "project", "created_by", "created_at", "updated_at")
    list_select_related = ("project", "tenant")
    list_filter = ("tenant",)
    search_fields = ("name", "project__project_id")
    fields = ("name", "tenant", "project", "created_by", "created_at", "updated_at")
    readonly_fields = fields
