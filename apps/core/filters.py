"""What the list filters (django-filter FilterSets) of the API and the portal share."""

from __future__ import annotations

import django_filters
from django_filters.fields import ChoiceField


class _AnyCaseChoiceField(ChoiceField):
    def to_python(self, value):
        value = super().to_python(value)
        return {str(choice).casefold(): str(choice) for choice, _ in self.choices}.get(
            value.casefold(), value
        )


class AnyCaseChoiceFilter(django_filters.ChoiceFilter):
    """One of the choices in any letter case: links and clients write ``active`` and
    ``ACTIVE`` alike. Anything else is invalid (a 400 through the API)."""

    field_class = _AnyCaseChoiceField
