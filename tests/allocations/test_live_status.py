"""Allocation status reaches open pages over WebSocket, through the real ASGI
server and the Redis channel layer, authorized by the portal session."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.models import Session
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from apps.allocations import services
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.support.members import member
from tests.support.pages import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def receive_until(ws, state, limit=50):
    seen = []
    for _ in range(limit):
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout=20))
        seen.append(message)
        if message["state"] == state:
            return seen
    raise AssertionError(f"never saw {state}: {seen}")


def watching(portal, user, project) -> tuple[str, dict]:
    """The project's allocations socket, and what ``user``'s browser sends to open it."""
    url = f"ws://127.0.0.1:{portal.port}/ws/projects/{project.pk}/allocations/"
    return url, {"Cookie": session_cookie(user), "Origin": portal.url}


def test_watcher_sees_progress_until_active(portal, allocator, project, nodes):
    url, headers = watching(portal, allocator, project)
    caller = principals.for_user(allocator)

    async def scenario():
        async with connect(url, additional_headers=headers) as ws:
            await asyncio.sleep(0.2)
            await database_sync_to_async(services.allocate)(
                caller,
                project,
                flavor_name="h100-8x",
                os_image="ubuntu-22.04",
            )
            return await receive_until(ws, "ACTIVE")

    seen = asyncio.run(scenario())
    progress = [message["progress"] for message in seen]
    assert progress == sorted(progress)
    assert progress[-1] == 100
    assert {"network", "os_deploy"} <= {message["step"] for message in seen}
    # What the pages show for them: words, not the pipeline's names.
    assert "Installing the operating system" in {message["step_label"] for message in seen}


def _signed_out(user) -> None:
    Session.objects.all().delete()  # the watcher's is the only session of this test


ENDINGS = {
    "removed": lambda user: Membership.objects.filter(user=user).delete(),
    "deactivated": lambda user: type(user).objects.filter(pk=user.pk).update(is_active=False),
    "signed_out": _signed_out,
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_watcher_whose_access_ended_hears_nothing_more(portal, allocator, project, nodes, ending):
    """The socket was authorized once, when opened: a viewer removed from the project, an
    account an operator deactivated, or a browser signed out elsewhere kept hearing of
    the project's allocations for as long as the page stayed open."""
    watcher = member("viewer", project=project)
    url, headers = watching(portal, watcher, project)
    caller = principals.for_user(allocator)

    async def scenario():
        async with connect(url, additional_headers=headers) as ws:
            await asyncio.sleep(0.2)
            await database_sync_to_async(ENDINGS[ending])(watcher)
            await database_sync_to_async(services.allocate)(
                caller, project, flavor_name="h100-8x", os_image="ubuntu-22.04"
            )
            try:
                return json.loads(await asyncio.wait_for(ws.recv(), timeout=20))
            except ConnectionClosed as closed:
                return closed.rcvd.code

    assert asyncio.run(scenario()) == 4403


@pytest.mark.parametrize("who", ["anonymous", "other_tenant", "foreign_origin"])
def test_socket_is_refused_outside_scope(portal, project, other_tenant_project, who):
    url = f"ws://127.0.0.1:{portal.port}/ws/projects/{project.pk}/allocations/"
    headers = {"Origin": portal.url}
    if who == "other_tenant":
        headers["Cookie"] = session_cookie(member("tenant_admin", tenant=other_tenant_project.tenant))
    if who == "foreign_origin":
        headers = {
            "Cookie": session_cookie(member("tenant_admin", tenant=project.tenant)),
            "Origin": "http://evil.example",
        }

    async def scenario():
        try:
            async with connect(url, additional_headers=headers) as ws:
                await asyncio.wait_for(ws.recv(), timeout=5)
        except InvalidStatus as exc:
            return exc.response.status_code
        except Exception as exc:  # noqa: BLE001 - closed after accept is also a refusal
            return getattr(getattr(exc, "rcvd", None), "code", "closed")
        return "open"

    assert asyncio.run(scenario()) in (403, 4403)
