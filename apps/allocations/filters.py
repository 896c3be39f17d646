"""The filters of allocation lists, for the API and the portal alike."""

from __future__ import annotations

import django_filters

from apps.allocations.models import Allocation
from apps.core.filters import AnyCaseChoiceFilter


class AllocationFilter(django_filters.FilterSet):
    state = AnyCaseChoiceFilter(choices=Allocation.State.choices, help_text="Only allocations in this state.")

    class Meta:
        model = Allocation
        fields = ["state"]
