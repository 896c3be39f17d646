"""An agent's telemetry for a node in an ACTIVE allocation reaches the allocation's
open pages as a "new points" hint on the project's socket (through the real ASGI
server and the Redis channel layer), at most one per allocation per throttle
window, beside the socket's state updates."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import connect

from apps.allocations import events
from apps.allocations import nodes as fleet
from tests.support.members import member
from tests.support.pages import session_cookie
from tests.support.telemetry import AGENT_TELEMETRY, readings

pytestmark = pytest.mark.django_db(transaction=True)


def agent_report(portal, credential: str) -> None:
    now = time.time()
    response = httpx.post(
        portal.url + AGENT_TELEMETRY,
        json={"readings": readings(now - 5, now, 5)},
        headers={"Authorization": f"Node {credential}"},
    )
    assert response.status_code == 200, response.text


def test_reports_reach_the_allocation_page_as_one_hint_a_window(portal, settings, active_allocation, project):
    settings.METRICS_URL = ""
    node = active_allocation.node
    _, credential = fleet.enroll(node.hostname, fleet.issue_bootstrap_token(node), address="127.0.0.1")
    url = f"ws://127.0.0.1:{portal.port}/ws/projects/{project.pk}/allocations/"
    headers = {"Cookie": session_cookie(member("viewer", project=project)), "Origin": portal.url}

    async def scenario():
        async with connect(url, additional_headers=headers) as ws:
            await asyncio.sleep(0.2)  # the consumer has joined its group
            await asyncio.to_thread(agent_report, portal, credential)
            await asyncio.to_thread(agent_report, portal, credential)  # within the window: no second hint
            # A state update after both: the next message after the hint must be it.
            await database_sync_to_async(events.allocation_changed)(active_allocation.pk)
            return [json.loads(await asyncio.wait_for(ws.recv(), timeout=20)) for _ in range(2)]

    hint, update = asyncio.run(scenario())
    assert hint == {"allocation_id": str(active_allocation.pk), "event": "points"}
    assert (update["allocation_id"], update["state"]) == (str(active_allocation.pk), "ACTIVE")
