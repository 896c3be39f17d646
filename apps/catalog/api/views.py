from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.catalog import services
from apps.catalog.models import App, AppVersion
from apps.core.errors import NotFound
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView


class AppSerializer(serializers.ModelSerializer):
    versions = serializers.SerializerMethodField()

    class Meta:
        model = App
        fields = ["slug", "name", "summary", "description", "publisher", "versions"]

    def get_versions(self, app) -> list[str]:
        return [v.version for v in app.versions.all() if v.status == AppVersion.Status.PUBLISHED]


class AppVersionSerializer(serializers.ModelSerializer):
    app = serializers.CharField(source="app.slug", read_only=True)

    class Meta:
        model = AppVersion
        fields = ["app", "version", "status", "published_at", "manifest"]


class CatalogAppListView(BaseListAPIView):
    serializer_class = AppSerializer

    def get_queryset(self):
        return services.visible_apps(self.principal).prefetch_related("versions").order_by("name")


class CatalogAppDetailView(BaseAPIView):
    @extend_schema(responses=AppSerializer, summary="An entitled app")
    def get(self, request, slug):
        app = services.visible_apps(self.principal).prefetch_related("versions").filter(slug=slug).first()
        if app is None:
            raise NotFound()
        return Response(AppSerializer(app).data)


class CatalogVersionView(BaseAPIView):
    @extend_schema(responses=AppVersionSerializer, summary="A published version with its manifest")
    def get(self, request, slug, version):
        found = (
            AppVersion.objects.select_related("app")
            .filter(
                app__in=services.visible_apps(self.principal),
                app__slug=slug,
                version=version,
                status=AppVersion.Status.PUBLISHED,
            )
            .first()
        )
        if found is None:
            raise NotFound()
        return Response(AppVersionSerializer(found).data)
