from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.api import BaseAPIView
from apps.core.idempotency import idempotent
from apps.metering import services
from apps.tenancy import policy
from apps.tenancy.models import Tenant
from apps.tenancy.roles import Perm


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
        return policy.get_object(
            Tenant.objects.all(),
            self.principal,
            Perm.TENANT_VIEW,
            action_perm or Perm.QUOTA_VIEW,
            tenant_id=tenant_id,
        )

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
