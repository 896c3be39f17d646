"""Instance state reaches open pages over WebSocket, through the real ASGI server and
the Redis channel layer, and only for instances the page's user may see."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import connect

from apps.runtime import events
from apps.runtime.models import AppInstance
from tests.support.instances import launched
from tests.support.members import member
from tests.support.pages import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_viewer_hears_of_shared_instances_only(portal, admin, project, allocation, jupyterlab):
    private = launched(admin, project, allocation)
    shared = launched(admin, project, allocation)
    AppInstance.objects.filter(pk=shared.pk).update(shared_with_project=True)
    viewer = member("viewer", project=project)
    url = f"ws://127.0.0.1:{portal.port}/ws/projects/{project.pk}/instances/"

    async def heard(cookie: str) -> list[dict]:
        headers = {"Cookie": cookie, "Origin": portal.url}
        async with connect(url, additional_headers=headers) as ws:
            await asyncio.sleep(0.2)
            await database_sync_to_async(events.record)(private, "state", "private news", to_state="stopping")
            await database_sync_to_async(events.record)(shared, "state", "shared news", to_state="stopping")
            messages = [json.loads(await asyncio.wait_for(ws.recv(), timeout=10))]
            if messages[0]["instance_id"] == str(private.pk):
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=10)))
            return messages

    # The admin sees both, in order; the viewer only the shared one, and nothing of the other.
    by_admin = asyncio.run(heard(session_cookie(admin)))
    by_viewer = asyncio.run(heard(session_cookie(viewer)))
    assert [message["instance_id"] for message in by_admin] == [str(private.pk), str(shared.pk)]
    assert by_viewer == [{"instance_id": str(shared.pk), "state": "stopping"}]
