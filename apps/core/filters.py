"""What the list filters (django-filter FilterSets) of the API and the portal share."""

from __future__ import annotations

import hashlib

import django_filters
from django.core.cache import cache
from django.db.models import QuerySet
from django_filters.fields import ChoiceField

from apps.core import outages

# How long a filter's list of the values a column holds is reused: on the audit trail
# (200,000 rows and growing) the DISTINCT behind it scans the table, about 70 ms a page,
# for a list that changes once a release.
CHOICES_CACHE_SECONDS = 300


def cached_choices(values: QuerySet) -> list:
    """``values`` (a ``values_list(...).distinct()``), from the cache when the same query
    ran in the last few minutes. The key is the query itself, scope conditions included,
    so callers with other scopes never share a list."""
    if values.query.is_empty():
        return []
    key = "choices:" + hashlib.sha256(str(values.query).encode()).hexdigest()
    try:
        return cache.get_or_set(key, lambda: list(values), CHOICES_CACHE_SECONDS)
    except Exception as exc:
        # A convenience, not a reason to refuse the page while the cache is down.
        if outages.dependency_down(exc) != "cache":
            raise
        return list(values)


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
