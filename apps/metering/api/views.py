from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import ValidationFailed
from apps.core.idempotency import idempotent
from apps.metering import billing, services, usage
from apps.tenancy import selectors as tenancy
from apps.tenancy.api.base import BaseAPIView
from apps.tenancy.models import Tenant
from apps.tenancy.roles import Perm


def _tenant_for(principal, tenant_id: str | None, perm: str) -> Tenant:
    if not tenant_id:
        raise ValidationFailed(details={"tenant_id": ["Name the tenant (its CCP domain id)."]})
    return tenancy.tenant_for(principal, tenant_id, perm)


class QuotaLineSerializer(serializers.Serializer):
    limit = serializers.IntegerField(allow_null=True)
    used = serializers.IntegerField()
    percent = serializers.FloatField()
    warning = serializers.ChoiceField(choices=["none", "80", "90"])


class QuotaReportSerializer(serializers.Serializer):
    tenant_id = serializers.CharField()
    resources = serializers.DictField(child=QuotaLineSerializer())


class QuotaView(BaseAPIView):
    def _tenant(self, tenant_id, action_perm=None) -> Tenant:
        return _tenant_for(self.principal, tenant_id, action_perm or Perm.QUOTA_VIEW)

    @staticmethod
    def _report(tenant) -> dict:
        return {"tenant_id": tenant.tenant_id, "resources": services.quota_report(tenant)}

    @extend_schema(responses=QuotaReportSerializer, summary="Quota limits and usage with 80/90 % warnings")
    def get(self, request, tenant_id):
        return Response(self._report(self._tenant(tenant_id)))

    @extend_schema(
        request={"application/json": {"type": "object", "additionalProperties": {"type": "integer"}}},
        responses=QuotaReportSerializer,
        summary="Set quota limits (CCP quota sync); effective at once",
    )
    @idempotent
    def post(self, request, tenant_id):
        tenant = self._tenant(tenant_id, Perm.QUOTA_MANAGE)
        services.update_quota(self.principal, tenant, request.data)
        return Response(self._report(tenant))


class ProjectUsageSerializer(serializers.Serializer):
    project_id = serializers.CharField(allow_null=True, help_text="null: the tenant's storage, no project's")
    name = serializers.CharField()
    gpu_hours = serializers.FloatField()
    cpu_hours = serializers.FloatField()
    node_hours = serializers.FloatField()
    cluster_hours = serializers.FloatField()
    storage_gb_hours = serializers.FloatField()
    gpu_utilization = serializers.FloatField(
        allow_null=True,
        help_text="Mean measured GPU utilization (DCGM_FI_DEV_GPU_UTIL, percent) of the project's GPUs "
        "while allocated in the window, beside the billed gpu_hours; null when not measured",
    )


# Built with type(): one of its fields is named "from", a Python keyword.
UsageSerializer = type(
    "UsageSerializer",
    (serializers.Serializer,),
    {
        "tenant_id": serializers.CharField(),
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "projects": ProjectUsageSerializer(many=True),
    },
)


WINDOW = [
    OpenApiParameter("tenant_id", str, required=True),
    OpenApiParameter("from", str, required=True, description="ISO 8601 date, or time with its zone"),
    OpenApiParameter(
        "to", str, required=True, description="ISO 8601 date, or time with its zone; after from"
    ),
]


class UsageView(BaseAPIView):
    @extend_schema(
        parameters=WINDOW, responses=UsageSerializer, summary="A tenant's usage per project in a window"
    )
    def get(self, request):
        tenant = _tenant_for(self.principal, request.query_params.get("tenant_id"), Perm.USAGE_VIEW)
        start, end = usage.window(request.query_params.get("from"), request.query_params.get("to"))
        return Response(
            {
                "tenant_id": tenant.tenant_id,
                "from": start.isoformat(),
                "to": end.isoformat(),
                "projects": usage.by_project(tenant, start, end),
            }
        )


class BillingExportView(BaseAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("tenant_id", str, required=True),
            OpenApiParameter("period", str, required=True, description="the month, YYYY-MM (UTC)"),
        ],
        responses={(200, "text/csv"): OpenApiResponse(description="one row per project and resource")},
        summary="A tenant's billing export for a month (CSV)",
    )
    def get(self, request):
        tenant = _tenant_for(self.principal, request.query_params.get("tenant_id"), Perm.USAGE_VIEW)
        start, end = usage.period(request.query_params.get("period"))
        return billing.csv_response(billing.export(self.principal, tenant, start, end), tenant, start)
