"""Live updates of one project, over WebSocket, for the portal's pages.

The portal session authorizes the socket (Channels' AuthMiddleware); the same
policy as the pages decides whether the user may watch the project. Domain apps
subclass it with their group and the fields they forward.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from apps.tenancy import principal as principals
from apps.tenancy.models import Project

POLICY_VIOLATION = 4403


@database_sync_to_async
def _may_watch(user, project_id, perm: str) -> bool:
    project = Project.objects.filter(pk=project_id).only("id", "tenant_id").first()
    if project is None:
        return False
    return principals.for_user(user).can(perm, project.tenant_id, project.id)


@database_sync_to_async
def _signed_in(user, session) -> bool:
    """Whether the socket's user is still signed in: the scope holds them as they were
    at the handshake, while an operator may have deactivated them or they may have
    signed out (their session gone) since."""
    active = get_user_model().objects.filter(pk=user.pk, is_active=True).exists()
    return active and session.exists(session.session_key)


class ProjectGroupConsumer(AsyncJsonWebsocketConsumer):
    perm: str = ""
    fields: tuple[str, ...] = ()

    def group_for(self, project_id) -> str:
        raise NotImplementedError

    async def connect(self):
        user = self.scope.get("user")
        project_id = self.scope["url_route"]["kwargs"]["project_id"]
        if user is None or not user.is_authenticated or not await _may_watch(user, project_id, self.perm):
            await self.close(code=POLICY_VIOLATION)
            return
        self.project_id = project_id
        self.group = self.group_for(project_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def still_watching(self) -> bool:
        """Asked again for each update: a membership, the account or its session can end
        while the page is open. When one has, the socket closes."""
        user, session = self.scope["user"], self.scope["session"]
        if await _signed_in(user, session) and await _may_watch(user, self.project_id, self.perm):
            return True
        await self.close(code=POLICY_VIOLATION)
        return False

    async def forward(self, event):
        await self.send_json({key: event[key] for key in self.fields})
