"""WebSockets through the proxy: checks before the handshake, a faithful relay, and
sockets closed once access ends."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from apps.proxy import sessions
from apps.runtime import services as runtime
from apps.runtime.services import runtime_secret
from apps.tenancy import principal as principals
from apps.tenancy.models import Membership
from tests.conftest import member
from tests.proxy.conftest import login_session, mint_ticket, open_session, route_url
from tests.proxy.test_dataplane_http import eventually

pytestmark = pytest.mark.django_db(transaction=True)


def ws_url(instance, path: str) -> str:
    return route_url(instance, path).replace("http://", "ws://", 1)


def handshake(server, cookie: str | None = None, origin: str | None = "route") -> dict:
    headers = {}
    if cookie:
        headers["Cookie"] = f"{sessions.COOKIE}={cookie}"
    if origin:
        headers["Origin"] = server.url if origin == "route" else origin
    return {"additional_headers": headers, "proxy": None, "open_timeout": 10}


def refused_status(url: str, **kwargs) -> int:
    async def attempt():
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, **kwargs):
                pass
        return refused.value.response.status_code

    return asyncio.run(attempt())


def test_messages_subprotocol_and_close_codes_pass_through(launch, proxy_server, owner, upstream):
    instance = launch()
    secret = runtime_secret(instance, "token")
    cookie = open_session(proxy_server, owner, instance)
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    first_url, second_url = ws_url(instance, f"ws?id={first}"), ws_url(instance, f"ws?id={second}")

    async def scenario():
        options = handshake(proxy_server, cookie)
        async with connect(first_url, subprotocols=["echo.v1", "echo.v2"], **options) as ws:
            assert ws.subprotocol == "echo.v2"  # the app's choice
            await ws.send("hello")
            assert await ws.recv() == "hello"
            await ws.send(b"\x00\x01binary")
            assert await ws.recv() == b"\x00\x01binary"
            await ws.send("headers")
            seen = json.loads(await ws.recv())
            await ws.send("close:4001:app says bye")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            app_close = (ws.close_code, ws.close_reason)
        async with connect(second_url, **options) as ws:
            await ws.send("ping")
            assert await ws.recv() == "ping"
            await ws.close(4002, "browser says bye")
        return seen, app_close

    seen, app_close = asyncio.run(scenario())
    assert app_close == (4001, "app says bye")
    assert eventually(lambda: upstream.get("ws-closed", id=second)) == {
        "code": 4002,
        "reason": "browser says bye",
    }
    # What the app saw: its own origin, the bridge and no platform cookie (the token it
    # echoed back is blanked before the browser gets the message).
    assert seen["origin"] == f"http://{seen['host']}"
    assert seen["authorization"] == "token "
    assert sessions.COOKIE not in seen.get("cookie", "")
    assert secret not in json.dumps(seen)


@pytest.mark.parametrize("who", ["anonymous", "other_tenant", "foreign_origin", "revoked"])
def test_handshakes_outside_access_are_refused_before_reaching_the_app(
    launch, proxy_server, owner, project, other_tenant_project, who
):
    instance = launch()
    cookie, origin = None, "route"
    if who == "other_tenant":
        cookie = open_session(
            proxy_server, member("tenant_admin", tenant=other_tenant_project.tenant), instance
        )
    if who == "foreign_origin":
        cookie, origin = open_session(proxy_server, owner, instance), "http://evil.example"
    if who == "revoked":
        colleague = member("project_admin", project=project)
        cookie = open_session(proxy_server, colleague, instance)
        Membership.objects.filter(user=colleague).delete()
    status = refused_status(ws_url(instance, "ws"), **handshake(proxy_server, cookie, origin))
    assert status == {"anonymous": 401, "other_tenant": 403, "foreign_origin": 403, "revoked": 403}[who]


def test_a_client_without_origin_is_not_a_browser_and_still_needs_the_cookie(launch, proxy_server, owner):
    instance = launch()
    assert refused_status(ws_url(instance, "ws"), **handshake(proxy_server, None, origin=None)) == 401
    cookie = open_session(proxy_server, owner, instance)
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(proxy_server, cookie, origin=None)) as ws:
            await ws.send("hi")
            return await ws.recv()

    assert asyncio.run(scenario()) == "hi"


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


def test_websockets_count_against_the_instance_limit(launch, proxy_server, owner):
    instance = launch(limits={"per_instance": 1})
    cookie = open_session(proxy_server, owner, instance)
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **handshake(proxy_server, cookie)) as ws:
            await ws.send("held")
            await ws.recv()
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, **handshake(proxy_server, cookie)):
                    pass
            return refused.value.response

    refused = asyncio.run(scenario())
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0


def test_an_app_that_refuses_the_websocket_refuses_the_browser(launch, proxy_server, owner):
    instance = launch()
    cookie = open_session(proxy_server, owner, instance)
    assert refused_status(ws_url(instance, "refuse"), **handshake(proxy_server, cookie)) == 403
