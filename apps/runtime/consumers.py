"""Live app instance state for a project's pages.

Every update carries only an id and a state; pages re-fetch what they show
through views that apply instance visibility, so a socket never leaks an
instance its user may not see.
"""

from __future__ import annotations

from apps.runtime.events import project_group
from apps.tenancy.consumers import ProjectGroupConsumer
from apps.tenancy.roles import Perm


class ProjectInstancesConsumer(ProjectGroupConsumer):
    perm = Perm.INSTANCE_VIEW
    fields = ("instance_id", "state")

    def group_for(self, project_id) -> str:
        return project_group(project_id)

    async def instance_update(self, event):
        await self.forward(event)
