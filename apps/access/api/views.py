from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.response import Response

from apps.access import services
from apps.access.api import serializers as s
from apps.allocations.api.agent_auth import AgentView
from apps.core.idempotency import idempotent
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView, validated
from apps.tenancy.principal import Principal


class AllocationAccessView(BaseAPIView):
    @extend_schema(responses=s.AccessSerializer, summary="How to log in to the allocation's node over SSH")
    def get(self, request, project_pk, pk):
        allocation = services.get_allocation(self.principal, project_pk, pk)
        return Response(s.AccessSerializer(services.access_info(allocation)).data)


@extend_schema_view(get=extend_schema(summary="Keys on the allocation's runtime user, with owner and state"))
class AuthorizedKeyListView(BaseListAPIView):
    serializer_class = s.AuthorizedKeySerializer

    def get_queryset(self):
        allocation = services.get_allocation(self.principal, self.kwargs["project_pk"], self.kwargs["pk"])
        return services.keys_of(allocation)

    @extend_schema(
        request=s.AuthorizedKeyCreateSerializer,
        responses={201: s.AuthorizedKeySerializer},
        summary="Put a public key on the runtime user (the node applies it within 10 s)",
    )
    @idempotent
    def post(self, request, project_pk, pk):
        data = validated(s.AuthorizedKeyCreateSerializer, request.data)
        allocation = services.get_allocation(self.principal, project_pk, pk)
        key = services.add_key(self.principal, allocation, **data)
        return Response(s.AuthorizedKeySerializer(key).data, status=201)


class AuthorizedKeyDetailView(BaseAPIView):
    @extend_schema(responses=s.AuthorizedKeySerializer, summary="One key on the runtime user")
    def get(self, request, project_pk, pk, kid):
        allocation = services.get_allocation(self.principal, project_pk, pk)
        return Response(s.AuthorizedKeySerializer(services.get_key(allocation, kid)).data)

    @extend_schema(responses={204: None}, summary="Take the key off the node (within 10 s)")
    def delete(self, request, project_pk, pk, kid):
        allocation = services.get_allocation(self.principal, project_pk, pk)
        services.remove_key(self.principal, allocation, kid)
        return Response(status=204)


def _person(principal: Principal) -> Principal:
    services.require_person(principal)
    return principal


@extend_schema_view(
    get=extend_schema(summary="The SSH public keys in your profile (put on each new allocation)")
)
class ProfileKeyListView(BaseListAPIView):
    serializer_class = s.ProfileKeySerializer

    def get_queryset(self):
        return services.profile_keys(_person(self.principal).user)

    @extend_schema(request=s.ProfileKeyCreateSerializer, responses={201: s.ProfileKeySerializer})
    @idempotent
    def post(self, request):
        data = validated(s.ProfileKeyCreateSerializer, request.data)
        key = services.add_profile_key(self.principal, **data)
        return Response(s.ProfileKeySerializer(key).data, status=201)


class ProfileKeyDetailView(BaseAPIView):
    @extend_schema(responses={204: None}, summary="Take a key out of your profile")
    def delete(self, request, kid):
        services.remove_profile_key(self.principal, kid)
        return Response(status=204)


class AgentAccessView(AgentView):
    @extend_schema(responses=s.AgentDesiredSerializer, summary="The keys the node's runtime user should hold")
    def get(self, request):
        return Response(services.desired_for_node(request.user.node), headers={"Cache-Control": "no-store"})

    @extend_schema(
        request=s.AgentReportSerializer,
        responses={204: None},
        summary="The node's SSH server and applied keys",
    )
    def post(self, request):
        data = validated(s.AgentReportSerializer, request.data)
        services.agent_report(request.user.node, **data)
        return Response(status=204)
