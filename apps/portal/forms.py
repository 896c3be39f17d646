"""Portal forms: shape and field checks only. The services decide everything
else and their ``ApiError`` details land on the form through ``add_api_error``."""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from apps.allocations.services import MAX_COUNT
from apps.core.errors import ApiError
from apps.core.models import AuditEvent
from apps.tenancy.models import Tenant, ccp_identifier
from apps.tenancy.roles import PROJECT_ROLES, Limit, Role

PROJECT_ROLE_CHOICES = [(role.value, role.label) for role in Role if role in PROJECT_ROLES]


def add_api_error(form: forms.Form, exc: ApiError) -> None:
    """Show a service's refusal on the form: field details on their fields, the rest on top."""
    placed = False
    for field, messages in (exc.details or {}).items():
        messages = [str(m) for m in messages] if isinstance(messages, (list, tuple)) else [str(messages)]
        form.add_error(field if field in form.fields else None, messages)
        placed = True
    if not placed:
        form.add_error(None, exc.message)


class ProjectForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    project_id = forms.CharField(
        label="Project id",
        max_length=64,
        validators=[ccp_identifier],
        help_text="The CCP cell id: letters, digits, '.', '_' or '-'. It cannot change later.",
    )
    name = forms.CharField(max_length=200)

    def __init__(self, *args, tenants=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants if tenants is not None else Tenant.objects.none()


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=PROJECT_ROLE_CHOICES, initial=Role.VIEWER)
    limit = forms.ChoiceField(choices=Limit.choices, required=False, initial=Limit.NONE)


class ServiceAccountForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. 'ci-pipeline'.")
    role = forms.ChoiceField(choices=PROJECT_ROLE_CHOICES, initial=Role.VIEWER)
    limit = forms.ChoiceField(choices=Limit.choices, required=False, initial=Limit.NONE)


class AuditFilterForm(forms.Form):
    action = forms.CharField(required=False, max_length=100)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), *AuditEvent.Outcome.choices])
    actor = forms.CharField(required=False, max_length=255)
    project = forms.ChoiceField(required=False, choices=[])
    date_from = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, projects=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [("", "Any project")] + [
            (str(p.pk), f"{p.tenant.name} / {p.name}") for p in projects
        ]

    def clean(self):
        data = super().clean()
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            self.add_error("date_to", "Must be on or after the start date.")
        return data

    def service_filters(self) -> dict[str, str]:
        """The filters of ``services.list_audit_events``: dates become whole UTC days, ``to`` inclusive."""
        data = self.cleaned_data
        filters = {key: data[key] for key in ("action", "outcome", "actor", "project") if data.get(key)}
        if data.get("date_from"):
            filters["from"] = _midnight(data["date_from"]).isoformat()
        if data.get("date_to"):
            filters["to"] = _midnight(data["date_to"] + timedelta(days=1)).isoformat()
        return filters


def _midnight(day) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


class AllocationForm(forms.Form):
    """Allocate nodes. ``flavors`` carry ``free`` (schedulable nodes now) for the labels."""

    flavor = forms.ChoiceField(choices=[])
    os_image = forms.ChoiceField(label="OS image", choices=[])
    count = forms.IntegerField(
        label="Nodes",
        min_value=1,
        max_value=MAX_COUNT,
        initial=1,
        help_text=f"All or nothing: 1 to {MAX_COUNT} nodes of the flavor.",
    )

    def __init__(self, *args, flavors=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["flavor"].choices = [
            (
                f.name,
                f"{f.name} \u00b7 {f.gpus_per_node}\u00d7 {f.gpu_model} \u00b7 {f.free} free",
            )
            for f in flavors
        ]
        self.fields["os_image"].choices = [(image, image) for image in settings.OS_IMAGES]
        self.fields["count"].widget.attrs.update({"inputmode": "numeric"})


class ReleaseForm(forms.Form):
    drain = forms.BooleanField(
        required=False,
        initial=True,
        label="Drain workloads first",
        help_text="Stop the node's workloads through its agent before the node is taken back.",
    )
    erase_disk = forms.BooleanField(
        required=False,
        label="Erase disks",
        help_text="Wipe local disks when the node returns to the pool (slower).",
    )
