"""An instance's Logs tab hears of new lines over the instance's own socket, through
the real ASGI server and channel layer: the newest line's id only, never a line, and
only for those who see the instance."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apps.runtime import agents
from tests.support.instances import launched
from tests.support.members import member
from tests.support.pages import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def test_who_sees_the_instance_hears_of_new_lines_and_no_one_else(
    portal,
    admin,
    project,
    allocation,
    jupyterlab,
):
    instance = launched(admin, project, allocation)
    url = f"ws://127.0.0.1:{portal.port}/ws/projects/{project.pk}/instances/{instance.pk}/logs/"

    async def heard(cookie: str):
        try:
            async with connect(url, additional_headers={"Cookie": cookie, "Origin": portal.url}) as ws:
                await asyncio.sleep(0.2)
                newest = await database_sync_to_async(agents.append_logs)(
                    allocation.node, instance.pk, ["token=hunter2 printed"]
                )
                return newest, json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
        except InvalidStatus as exc:
            return exc.response.status_code

    newest, message = asyncio.run(heard(session_cookie(admin)))
    assert message == {"instance_id": str(instance.pk), "newest": newest}
    # A viewer of the project does not see another member's private instance.
    assert asyncio.run(heard(session_cookie(member("viewer", project=project)))) == 403
