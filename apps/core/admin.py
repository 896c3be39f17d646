"""Operator surfaces for the core models, and the base every editable admin uses.

Admin edits are privileged actions like any other: ``AuditedModelAdmin`` writes
them to the audit trail next to Django's own ``LogEntry``. Records that must
never change (audit events, idempotency records) are read-only here.
"""

from __future__ import annotations

import json
import logging

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from apps.core import audit, drivers
from apps.core.errors import ApiError, Conflict
from apps.core.filters import cached_choices
from apps.core.models import AuditEvent, IdempotencyRecord, SimulatedFault, SimulatedResource


class AdminActor:
    """The signed-in operator as an audit actor (what ``Principal`` offers, without its grants)."""

    audit_actor_type = "user"

    def __init__(self, user):
        self.audit_actor = user.get_username()


def _changes(message) -> list:
    if isinstance(message, str):
        return [message] if message else []
    return json.loads(json.dumps(message or [], default=str))


def _record(request, obj, verb: str, details: dict) -> None:
    audit.record(
        AdminActor(request.user), f"admin.{obj._meta.model_name}.{verb}", target=obj, details=details
    )


class AuditedModelAdmin(admin.ModelAdmin):
    def log_addition(self, request, obj, message):
        _record(request, obj, "add", {"changes": _changes(message)})
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        _record(request, obj, "change", {"changes": _changes(message)})
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        for obj in queryset:
            _record(request, obj, "delete", {"object": str(obj)})
        return super().log_deletions(request, queryset)


class _NoWrites:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyModelAdmin(_NoWrites, admin.ModelAdmin):
    """Viewable by operators with the view permission; never added, changed or deleted here."""

    def has_operate_permission(self, request):
        # Actions with ``permissions=["operate"]`` change the objects through their services:
        # they take the model's change permission, which no form here uses.
        return admin.ModelAdmin.has_change_permission(self, request)


class ReadOnlyInline(_NoWrites, admin.TabularInline):
    """Related rows shown on their parent's page, as the system left them."""

    extra = 0


class CachedValuesFilter(admin.AllValuesFieldListFilter):
    """Django's filter by each value a column holds, its DISTINCT cached for a few minutes
    (``cached_choices``)."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        self.lookup_choices = cached_choices(self.lookup_choices)


class IsNullFilter(admin.SimpleListFilter):
    """Splits the rows on whether ``field`` is null. Subclasses name ``field`` and the
    two choices, each ``(value, label)``: ``when_null`` and ``when_set``."""

    field: str
    when_null: tuple[str, str]
    when_set: tuple[str, str]

    def lookups(self, request, model_admin):
        return (self.when_null, self.when_set)

    def queryset(self, request, queryset):
        isnull = {self.when_null[0]: True, self.when_set[0]: False}.get(self.value())
        return queryset if isnull is None else queryset.filter(**{f"{self.field}__isnull": isnull})


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    list_display = (
        "occurred_at",
        "actor",
        "actor_type",
        "action",
        "outcome",
        "target_type",
        "target_id",
        "correlation_id",
    )
    # A date filter rather than date_hierarchy, whose year links are a DISTINCT over
    # every row on every page.
    list_filter = (
        "outcome",
        ("occurred_at", admin.DateFieldListFilter),
        ("actor_type", CachedValuesFilter),
        ("action", CachedValuesFilter),
    )
    search_fields = ("=correlation_id", "actor", "target_id")
    fields = (
        "occurred_at",
        "actor",
        "actor_type",
        "action",
        "outcome",
        "target_type",
        "target_id",
        "tenant_id",
        "project_id",
        "correlation_id",
        "source_ip",
        "details",
    )
    readonly_fields = fields
    list_per_page = 50
    # The trail grows without bound: skip the unfiltered COUNT(*) on every page.
    show_full_result_count = False


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyModelAdmin):
    # The stored response body is left out: it can hold a one-time secret
    # (a created service account's client_secret), sealed at rest and never shown.
    list_display = ("created_at", "principal", "key", "response_status")
    list_filter = ("response_status",)
    search_fields = ("principal", "=key")
    date_hierarchy = "created_at"
    fields = ("created_at", "principal", "key", "request_hash", "response_status")
    readonly_fields = fields
    show_full_result_count = False


# --- Operator actions that call services, one object at a time ------------------------------

logger = logging.getLogger(__name__)


def apply_each(modeladmin, request, objects, operation, *, done: str, label=str, already=None) -> list:
    """Run ``operation(obj)`` (a service call) for each object and report each outcome.

    Successes are summed up in one message (``done``: "Approved", "Released"...);
    a refusal in the object's state (``InvalidState``/``Conflict``) is a warning
    naming the object, any other service refusal (``Forbidden``...) an error, and
    an unexpected failure is logged and reported, never a 500. The services write
    the audit events, successes and denials alike. Returns the objects that succeeded.

    ``already``: ``(test, message)``. The objects ``test`` finds already there (a
    service would do nothing for them) are named under ``message``, as information,
    and left alone: not counted as done.
    """
    if already is not None:
        test, message = already
        pending, there = [], []
        for obj in objects:
            (there if test(obj) else pending).append(obj)
        if there:
            modeladmin.message_user(
                request, f"{message}: {', '.join(label(obj) for obj in there)}.", messages.INFO
            )
        objects = pending
    succeeded, names = [], []
    for obj in objects:
        try:
            operation(obj)
        except Conflict as exc:
            modeladmin.message_user(request, f"Refused for {label(obj)}: {exc.message}", messages.WARNING)
        except ApiError as exc:
            modeladmin.message_user(request, f"Refused for {label(obj)}: {exc.message}", messages.ERROR)
        except Exception:
            logger.exception("admin action on %s failed", label(obj))
            correlation_id = getattr(request, "correlation_id", "-")
            message = f"Failed for {label(obj)}: an unexpected error (correlation id {correlation_id})."
            modeladmin.message_user(request, message, messages.ERROR)
        else:
            succeeded.append(obj)
            names.append(label(obj))
    if succeeded:
        modeladmin.message_user(request, f"{done} {len(succeeded)}: {', '.join(names)}.", messages.SUCCESS)
    return succeeded


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Recorded in the audit trail and shown to operators.",
    )


def apply_each_with_reason(
    modeladmin,
    request,
    queryset,
    operation_for,
    *,
    action: str,
    title: str,
    intro: str,
    submit: str,
    **options,
):
    """``apply_each`` behind a confirmation page that asks for a reason.

    ``operation_for(reason)`` gives the operation for each object; it is called only
    once a valid reason is posted back, so what it sets up (the operator) is not
    worked out for the confirmation page. ``options`` are ``apply_each``'s.
    """
    form = ReasonForm(request.POST if "apply" in request.POST else None)
    if form.is_valid():
        apply_each(modeladmin, request, queryset, operation_for(form.cleaned_data["reason"]), **options)
        return None
    return confirmation_page(
        modeladmin,
        request,
        queryset,
        action=action,
        title=title,
        intro=intro,
        submit=submit,
        form=form,
        label=options.get("label", str),
    )


def confirmation_page(
    modeladmin,
    request,
    queryset,
    *,
    action: str,
    title: str,
    intro: str,
    submit: str,
    form=None,
    label=str,
    template: str = "admin/fleet/confirm_action.html",
):
    """The intermediate page of an action that needs a confirmation (and maybe a reason).

    Posting it back re-runs the action with ``apply`` set, the Django admin way
    (like ``delete_selected``), so the selection travels as ``_selected_action``.
    """
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "submit": submit,
        "action": action,
        "form": form,
        "objects": [(obj.pk, label(obj)) for obj in queryset],
        "opts": opts,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media + (form.media if form is not None else forms.Media()),
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, template, context)


# --- Simulated hardware: fault injection (demo, tests) and the simulated state ----------------
# Registered by ``register_simulation``, at the end, as the driver settings say.

SIMULATED_SYSTEMS = (("maas", "MAAS"), ("ndfc", "NDFC"), ("ufm", "UFM"), ("ddn", "DDN"))
# What the simulated drivers ask ``simulation.inject`` about today (a hint, not a limit).
SIMULATED_OPERATIONS = {
    "maas": "allocate, deploy, power_on, power_off, release",
    "ndfc": "attach, detach",
    "ufm": "create_pkey, add_guids, remove_guids",
    "ddn": "create_directory, create_nodemap, add_node, remove_node",
}


class SimulatedFaultForm(forms.ModelForm):
    system = forms.ChoiceField(choices=SIMULATED_SYSTEMS)

    class Meta:
        model = SimulatedFault
        fields = ("system", "operation", "target", "mode", "remaining", "probability", "hardware", "message")
        help_texts = {
            "operation": "; ".join(f"{system}: {ops}" for system, ops in SIMULATED_OPERATIONS.items()),
            "remaining": "fail this many times, then succeed (blank: every time)",
            "probability": "between 0 and 1; below 1 fails at random",
            "hardware": "the node's own fault: it goes to failed and waits for an operator",
        }

    def clean_probability(self):
        value = self.cleaned_data["probability"]
        if not 0 <= value <= 1:
            raise forms.ValidationError("A probability is between 0 and 1.")
        return value


class SimulatedFaultAdmin(AuditedModelAdmin):
    """Operators inject faults into the simulated drivers (demo and rehearsal of failure paths)."""

    form = SimulatedFaultForm
    list_display = ("__str__", "target", "mode", "remaining", "probability", "hardware", "created_at")
    list_filter = ("system", "mode", "hardware")
    search_fields = ("operation", "target", "message")


class SimulatedResourceAdmin(ReadOnlyModelAdmin):
    """What the simulated MAAS, NDFC, UFM and DDN remember (changed only by the drivers)."""

    list_display = ("system", "kind", "key", "updated_at")
    list_filter = ("system", "kind")
    search_fields = ("key",)
    fields = ("system", "kind", "key", "state", "updated_at")
    readonly_fields = fields


def register_simulation(site) -> None:
    """The simulated world's models, only while a simulated driver runs: beside real
    drivers only they hold nothing and their faults would reach no system."""
    if drivers.simulated_systems():
        site.register(SimulatedFault, SimulatedFaultAdmin)
        site.register(SimulatedResource, SimulatedResourceAdmin)


register_simulation(admin.site)
