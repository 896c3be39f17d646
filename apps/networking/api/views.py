from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.idempotency import idempotent
from apps.core.schema import UNAVAILABLE
from apps.networking import services
from apps.networking.models import Vlan, Vrf
from apps.tenancy import selectors as tenancy
from apps.tenancy.api.base import BaseAPIView, validated
from apps.tenancy.models import ccp_identifier
from apps.tenancy.roles import Perm


class VpcRequestSerializer(serializers.Serializer):
    tenant_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    vpc_id = serializers.CharField(max_length=128)
    project_id = serializers.CharField(max_length=64, required=False, allow_blank=True)


class VlanSerializer(serializers.ModelSerializer):
    class Meta:
        model = Vlan
        fields = ["purpose", "vlan_id"]


class VrfSerializer(serializers.ModelSerializer):
    tenant_id = serializers.CharField(source="tenant.tenant_id", read_only=True)
    vlans = VlanSerializer(many=True, read_only=True)

    class Meta:
        model = Vrf
        fields = ["id", "name", "vni", "vpc_id", "tenant_id", "vlans", "assigned_at"]


class VpcView(BaseAPIView):
    @extend_schema(
        request=VpcRequestSerializer,
        responses={201: VrfSerializer, 200: VrfSerializer, 503: UNAVAILABLE},
        summary="A tenant VRF with its 4 VLANs for a CCP VPC (idempotent per vpc_id)",
    )
    @idempotent
    def post(self, request):
        data = validated(VpcRequestSerializer, request.data)
        tenant = tenancy.tenant_for(self.principal, data["tenant_id"], Perm.NETWORK_MANAGE)
        vrf, created = services.create_vpc(self.principal, tenant, vpc_id=data["vpc_id"])
        vrf = Vrf.objects.select_related("tenant").prefetch_related("vlans").get(pk=vrf.pk)
        return Response(VrfSerializer(vrf).data, status=201 if created else 200)
