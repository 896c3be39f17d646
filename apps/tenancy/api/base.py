"""Base DRF views: every view reads the caller as ``self.principal``, and what it was sent
as a serializer validates it (``validated``)."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import generics
from rest_framework.views import APIView

from apps.tenancy.principal import Principal


def validated(serializer_class, data) -> dict:
    """``data`` (a request's body or query) as ``serializer_class`` validates it; anything
    else is a 400 in the error envelope, naming each field."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class PrincipalMixin:
    @property
    def principal(self) -> Principal:
        return self.request.auth


class BaseAPIView(PrincipalMixin, APIView):
    pass


class BaseListAPIView(PrincipalMixin, generics.ListAPIView):
    pass


# A list narrowed by the query parameters of its ``filterset_class``. Subclasses name their
# model in ``queryset`` (``Model.objects.none()``) for the schema's filter parameters, as
# their ``get_queryset`` needs a caller. Not a default filter backend: the schema would then
# call every other list's ``get_queryset``. (No docstring: the schema would show it.)
class FilteredListAPIView(BaseListAPIView):
    filter_backends = [DjangoFilterBackend]
