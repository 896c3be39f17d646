"""The filters of tenancy's lists: the audit trail (for the API and the portal's audit page
alike) and the portal's project list."""

from __future__ import annotations

import django_filters

from apps.core.models import AuditEvent
from apps.tenancy.models import Project


class AuditEventFilter(django_filters.FilterSet):
    action = django_filters.CharFilter()
    outcome = django_filters.ChoiceFilter(choices=AuditEvent.Outcome.choices)
    actor = django_filters.CharFilter()
    project = django_filters.UUIDFilter(field_name="project_id", help_text="A project's UUID.")
    to = django_filters.IsoDateTimeFilter(
        field_name="occurred_at", lookup_expr="lt", help_text="Events before this RFC 3339 time."
    )

    class Meta:
        model = AuditEvent
        fields = ["action", "outcome", "actor", "project", "to"]


# "from" is a Python keyword, so it cannot be declared in the class body; the contract names it.
AuditEventFilter.base_filters["from"] = django_filters.IsoDateTimeFilter(
    field_name="occurred_at", lookup_expr="gte", help_text="Events at or after this RFC 3339 time."
)


class ProjectFilter(django_filters.FilterSet):
    tenant = django_filters.UUIDFilter(field_name="tenant_id", help_text="A tenant's UUID.")

    class Meta:
        model = Project
        fields = ["tenant"]
