"""Live app instance state for a project's pages.

Every update carries only an id and a state, and reaches a socket only when its user
may see the instance (the project's group also carries instances private to their
owner or shared by name); pages re-fetch what they show through views that apply
instance visibility.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from apps.runtime.events import project_group
from apps.runtime.services import visible_instances
from apps.tenancy import principal as principals
from apps.tenancy.consumers import ProjectGroupConsumer
from apps.tenancy.roles import Perm


@database_sync_to_async
def _sees(user, instance_id) -> bool:
    # Asked afresh for every update: a share or a membership can change while the page is open.
    return visible_instances(principals.for_user(user)).filter(pk=instance_id).exists()


class ProjectInstancesConsumer(ProjectGroupConsumer):
    perm = Perm.INSTANCE_VIEW
    fields = ("instance_id", "state")

    def group_for(self, project_id) -> str:
        return project_group(project_id)

    async def instance_update(self, event):
        if await _sees(self.scope["user"], event["instance_id"]):
            await self.forward(event)
