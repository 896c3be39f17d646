"""What only the ASGI proxy does with WebSockets: it closes an open socket once access
ends (nginx keeps one until it closes, docs/decisions/0016). What both data planes
do is in ``test_data_planes.py``."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.proxy import sessions
from apps.runtime import services as runtime
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.conftest import member
from tests.proxy.conftest import handshake, login_session, mint_ticket, ws_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("ending", ["stop", "logout", "revoke"])
def test_an_open_websocket_is_closed_when_access_ends(launch, proxy_server, owner, project, ending):
    instance = launch()
    user = owner if ending != "revoke" else member("project_admin", project=project)
    session = login_session(user)
    exchanged = mint_ticket(user, instance, session)
    cookie = httpx.post(f"{proxy_server.url}/_gpuaas/session", data={"ticket": exchanged["ticket"]}).cookies[
        sessions.COOKIE
    ]

    def end_access():
        if ending == "stop":
            runtime.change(principals.for_user(owner), instance, "stop")
        elif ending == "logout":
            sessions.end_platform_session(session.session_key, user.pk)  # what logging out does
        else:
            Membership.objects.filter(user=user).delete()

    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(proxy_server, cookie)) as ws:
            await ws.send("still here")
            assert await ws.recv() == "still here"
            await asyncio.to_thread(end_access)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), timeout=20)
            return ws.close_code

    assert asyncio.run(scenario()) == 4403
