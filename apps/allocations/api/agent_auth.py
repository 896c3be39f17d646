"""How a node's agent authenticates to ``/api/agent/v1/``: ``Authorization: Node
<credential>``. Here, beside the nodes, so that every app serving the agent (the
runtime's tasks, the access app's keys) uses the one check."""

from __future__ import annotations

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import IsAuthenticated
from rest_framework.views import APIView

from apps.allocations import nodes
from apps.core.errors import Unauthenticated


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
        return AgentUser(node), nodes.agent_principal(node)


class AgentUser:
    is_authenticated = True
    is_anonymous = False

    def __init__(self, node):
        self.node = node
        self.username = f"agent:{node.hostname}"


class AgentView(APIView):
    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsAuthenticated]
