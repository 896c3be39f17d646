from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers

from apps.monitoring import series
from apps.tenancy.api.base import BaseAPIView


class GpuSeriesSerializer(serializers.Serializer):
    node_id = serializers.UUIDField()
    hostname = serializers.CharField()
    allocation_id = serializers.UUIDField()
    project_id = serializers.CharField(help_text="CCP's project id")
    gpu = serializers.IntegerField(help_text="the GPU's index on its node")
    uuid = serializers.CharField(help_text="the GPU's UUID")
    metric = serializers.ChoiceField(choices=series.CHART_METRICS)
    unit = serializers.CharField()
    points = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2),
        help_text="[unix_seconds, value], each the mean over the step ending there",
    )


# Built with type(): one of its fields is named "from", a Python keyword.
GpuMetricsSerializer = type(
    "GpuMetricsSerializer",
    (serializers.Serializer,),
    {
        "tenant_id": serializers.CharField(),
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "step": serializers.IntegerField(),
        "series": GpuSeriesSerializer(many=True),
    },
)


class GpuMetricsView(BaseAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "from", str, description="ISO 8601 with a zone, or unix seconds; default: to - 1 h"
            ),
            OpenApiParameter("to", str, description="ISO 8601 with a zone, or unix seconds; default: now"),
            OpenApiParameter(
                "step", int, description="seconds between points (default 60); at most 11,000 points"
            ),
            OpenApiParameter("project_id", str, description="only this project's nodes (CCP project id)"),
            OpenApiParameter("node_id", str, description="only this node"),
        ],
        responses=GpuMetricsSerializer,
        summary="GPU telemetry of a tenant's nodes, for the time they were the tenant's",
    )
    def get(self, request, tenant_id):
        params = request.query_params
        body = series.gpu_series(
            self.principal,
            tenant_id,
            start=params.get("from"),
            end=params.get("to"),
            step=params.get("step"),
            project_id=params.get("project_id"),
            node_id=params.get("node_id"),
        )
        # Encoded by series.as_json, not DRF's renderer (decision 0068).
        return HttpResponse(series.as_json(body), content_type="application/json")
