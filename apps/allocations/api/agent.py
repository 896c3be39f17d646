"""Node agent API (``/api/agent/v1/``): enrollment with the one-time bootstrap
token and heartbeats with the node credential (``Authorization: Node <credential>``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.allocations import nodes
from apps.core.errors import Unauthenticated
from apps.tenancy.principal import Principal


class NodeCredentialAuthentication(BaseAuthentication):
    keyword = "Node"

    def authenticate_header(self, request):
        return self.keyword

    def authenticate(self, request):
        scheme, _, credential = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme != self.keyword:
            return None
        try:
            node = nodes.authenticate_agent(credential.strip())
        except Unauthenticated as exc:
            raise AuthenticationFailed(exc.message) from exc
        # Like every API caller, the agent is a Principal (for rate limits and audit); it holds no role.
        return AgentUser(node), Principal(kind="node", key=f"node:{node.pk}", name=f"node:{node.hostname}")


class AgentUser:
    is_authenticated = True
    is_anonymous = False

    def __init__(self, node):
        self.node = node
        self.username = f"agent:{node.hostname}"


class EnrollSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=253)
    bootstrap_token = serializers.CharField(max_length=200, trim_whitespace=False)


class EnrolledSerializer(serializers.Serializer):
    node_id = serializers.UUIDField()
    credential = serializers.CharField(help_text="the node's own credential; shown once")
    approved = serializers.BooleanField()


class EnrollView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=EnrollSerializer, responses={201: EnrolledSerializer}, summary="Agent enrollment")
    def post(self, request):
        data = EnrollSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        node, credential = nodes.enroll(data.validated_data["hostname"], data.validated_data["bootstrap_token"])
        return Response({"node_id": str(node.pk), "credential": credential, "approved": node.approved}, status=201)


class HeartbeatView(APIView):
    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses={204: None}, summary="Agent heartbeat")
    def post(self, request):
        nodes.heartbeat(request.user.node)
        return Response(status=204)
