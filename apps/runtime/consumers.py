"""Live app instance state for a project's pages.

Every update carries only an id and a state, and reaches a socket only when its user
may see the instance (the project's group also carries instances private to their
owner or shared by name); pages re-fetch what they show through views that apply
instance visibility.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.runtime.events import logs_group, project_group
from apps.runtime.services import visible_instances
from apps.tenancy import principal as principals
from apps.tenancy.consumers import POLICY_VIOLATION, ProjectGroupConsumer
from apps.tenancy.roles import Perm


@database_sync_to_async
def _sees(user, instance_id) -> bool:
    # Asked afresh for every update: a share or a membership can change while the page is open.
    return visible_instances(principals.for_user(user)).filter(pk=instance_id).exists()


@database_sync_to_async
def _sees_in(user, project_id, instance_id) -> bool:
    return visible_instances(principals.for_user(user)).filter(project_id=project_id, pk=instance_id).exists()


class ProjectInstancesConsumer(ProjectGroupConsumer):
    perm = Perm.INSTANCE_VIEW
    fields = ("instance_id", "state")

    def group_for(self, project_id) -> str:
        return project_group(project_id)

    async def instance_update(self, event):
        if await _sees(self.scope["user"], event["instance_id"]):
            await self.forward(event)


class InstanceLogsConsumer(AsyncJsonWebsocketConsumer):
    """An instance's Logs tab: told the newest line's id whenever its agent ships more.
    Open to whoever may see the instance, asked again for every message."""

    async def connect(self):
        user = self.scope.get("user")
        kwargs = self.scope["url_route"]["kwargs"]
        self.instance_id = str(kwargs["instance_id"])
        if (
            user is None
            or not user.is_authenticated
            or not await _sees_in(user, kwargs["project_id"], self.instance_id)
        ):
            await self.close(code=POLICY_VIOLATION)
            return
        self.group = logs_group(self.instance_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def instance_logs(self, event):
        if not await _sees(self.scope["user"], self.instance_id):
            await self.close(code=POLICY_VIOLATION)
            return
        await self.send_json({"instance_id": event["instance_id"], "newest": event["newest"]})
