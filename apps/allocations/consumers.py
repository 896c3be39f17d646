"""Live allocation status for a project's pages, over WebSocket.

The browser's portal session authorizes the socket (Channels' AuthMiddleware);
the same policy as the pages decides whether it may watch the project.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.allocations.events import project_group
from apps.tenancy import principal as principals
from apps.tenancy.models import Project
from apps.tenancy.roles import Perm

POLICY_VIOLATION = 4403


@database_sync_to_async
def _may_watch(user, project_id) -> bool:
    project = Project.objects.filter(pk=project_id).only("id", "tenant_id").first()
    if project is None:
        return False
    return principals.for_user(user).can(Perm.ALLOCATION_VIEW, project.tenant_id, project.id)


class ProjectAllocationsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        project_id = self.scope["url_route"]["kwargs"]["project_id"]
        if user is None or not user.is_authenticated or not await _may_watch(user, project_id):
            await self.close(code=POLICY_VIOLATION)
            return
        self.group = project_group(project_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def allocation_update(self, event):
        await self.send_json({key: event[key] for key in ("allocation_id", "state", "step", "progress")})
