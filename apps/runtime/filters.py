"""The filters of app instance lists, for the API and the portal alike."""

from __future__ import annotations

import django_filters

from apps.core.filters import AnyCaseChoiceFilter
from apps.runtime.models import AppInstance


class AppInstanceFilter(django_filters.FilterSet):
    state = AnyCaseChoiceFilter(
        choices=AppInstance.State.choices,
        help_text="Only instances in this state; without it, every instance but the deleted ones.",
    )

    class Meta:
        model = AppInstance
        fields = ["state"]

    def filter_queryset(self, queryset):
        if not self.form.cleaned_data.get("state"):
            queryset = queryset.exclude(state=AppInstance.State.DELETED)
        return super().filter_queryset(queryset)
