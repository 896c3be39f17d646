"""Live allocation status for a project's pages."""

from __future__ import annotations

from apps.allocations.events import project_group
from apps.tenancy.consumers import ProjectGroupConsumer
from apps.tenancy.roles import Perm


class ProjectAllocationsConsumer(ProjectGroupConsumer):
    perm = Perm.ALLOCATION_VIEW
    fields = ("allocation_id", "state", "step", "step_label", "progress")

    def group_for(self, project_id) -> str:
        return project_group(project_id)

    async def allocation_update(self, event):
        if await self.still_watching():
            await self.forward(event)

    async def allocation_points(self, event):
        if await self.still_watching():
            await self.send_json({key: event[key] for key in ("allocation_id", "event")})
