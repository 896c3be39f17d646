"""Base DRF views: every view reads the caller as ``self.principal``."""

from __future__ import annotations

from rest_framework import generics
from rest_framework.views import APIView

from apps.tenancy.principal import Principal


class PrincipalMixin:
    @property
    def principal(self) -> Principal:
        return self.request.auth


class BaseAPIView(PrincipalMixin, APIView):
    pass


class BaseListAPIView(PrincipalMixin, generics.ListAPIView):
    pass
