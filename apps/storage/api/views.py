from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.idempotency import idempotent
from apps.core.schema import QUOTA_EXCEEDED, UNAVAILABLE
from apps.storage import services
from apps.storage.models import TenantStorage
from apps.tenancy import selectors as tenancy
from apps.tenancy.api.base import BaseAPIView, validated
from apps.tenancy.models import ccp_identifier
from apps.tenancy.roles import Perm


class TenantStorageRequestSerializer(serializers.Serializer):
    tenant_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    tier = serializers.CharField(max_length=32, required=False)
    quota_gb = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=2**31 - 1,
        help_text="On existing storage: the directory's new quota (resize); growing takes tenant quota",
    )


class TenantStorageSerializer(serializers.ModelSerializer):
    tenant_id = serializers.CharField(source="tenant.tenant_id", read_only=True)

    class Meta:
        model = TenantStorage
        fields = ["tenant_id", "path", "nodemap", "pkey", "quota_gb", "tier", "status", "status_reason"]


class TenantStorageView(BaseAPIView):
    @extend_schema(
        request=TenantStorageRequestSerializer,
        responses={
            201: TenantStorageSerializer,
            200: TenantStorageSerializer,
            422: QUOTA_EXCEEDED,
            503: UNAVAILABLE,
        },
        summary="Tenant Lustre directory, NodeMap and PKey (idempotent per tenant); resize with quota_gb",
    )
    @idempotent
    def post(self, request):
        data = validated(TenantStorageRequestSerializer, request.data)
        tenant = tenancy.tenant_for(self.principal, data["tenant_id"], Perm.STORAGE_MANAGE)
        storage, created = services.create_tenant_storage(
            self.principal,
            tenant,
            tier=data.get("tier"),
            quota_gb=data.get("quota_gb"),
        )
        return Response(TenantStorageSerializer(storage).data, status=201 if created else 200)
