"""A WebSocket through either data plane leaves two audit records (seed 002: audit
visibility for connect and disconnect): one when it opens, one when it closes with
its totals, and none per message."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.core.models import AuditEvent
from apps.runtime import services as runtime
from apps.tenancy import principal as principals
from tests.support.proxy import eventually, handshake, open_session, ws_url

pytestmark = pytest.mark.django_db(transaction=True)

CONNECT, DISCONNECT = "proxy.websocket.connect", "proxy.websocket.disconnect"


def socket_records(instance) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(target_id=str(instance.pk), action__startswith="proxy.websocket.").order_by(
            "id"
        )
    )


def test_a_websocket_is_audited_once_when_it_opens_and_once_when_it_closes(data_plane, launch, owner):
    instance = launch()
    cookie = open_session(data_plane, owner, instance)
    given = "ws-" + uuid.uuid4().hex
    options = handshake(data_plane, cookie)
    options["additional_headers"]["X-Correlation-ID"] = given
    url = ws_url(instance, "ws")

    async def scenario():
        async with connect(url, **options) as ws:
            # Recorded while the socket is open, not only once it has closed.
            while_open = await database_sync_to_async(eventually)(lambda: socket_records(instance))
            for _ in range(50):
                await ws.send("hello")
                assert await ws.recv() == "hello"
            await ws.send("h\u00e9")  # two bytes for the é
            await ws.recv()
            await ws.send(b"\x00" * 10)
            await ws.recv()
            await ws.close(4002, "browser says bye")
        return [record.action for record in while_open]

    assert asyncio.run(scenario()) == [CONNECT]
    records = eventually(lambda: (found := socket_records(instance)) and len(found) == 2 and found)
    assert [record.action for record in records] == [CONNECT, DISCONNECT]  # and none per message
    opened, closed = records
    for record in records:
        assert (record.actor, record.actor_type, record.outcome) == (owner.username, "user", "success")
        assert (record.target_type, record.tenant_id, record.project_id) == (
            "appinstance",
            instance.tenant_id,
            instance.project_id,
        )
        assert record.correlation_id == given  # the connection's, as its access log line has it
        assert record.details["endpoint"] == "web"
        assert record.details["route"] == str(instance.proxy_routes.get().pk)
    assert opened.details["path"].endswith(f"/w/{instance.pk}/web/ws")
    totals = closed.details
    assert (totals["closed_by"], totals["close_code"]) == ("browser", 4002)
    assert totals["messages_from_browser"] == totals["messages_from_app"] == 52
    assert totals["bytes_from_browser"] == totals["bytes_from_app"] == 50 * 5 + 3 + 10
    connected_at = datetime.fromisoformat(totals["connected_at"])
    disconnected_at = datetime.fromisoformat(totals["disconnected_at"])
    assert connected_at < disconnected_at
    assert totals["duration_seconds"] == pytest.approx(
        (disconnected_at - connected_at).total_seconds(), abs=0.01
    )


@pytest.mark.parametrize("ending", ["app", "platform"])
def test_the_close_record_says_who_ended_the_socket(data_plane, launch, owner, ending):
    instance = launch()
    cookie = open_session(data_plane, owner, instance)
    url, principal = ws_url(instance, "ws"), principals.for_user(owner)

    async def scenario():
        async with connect(url, **handshake(data_plane, cookie)) as ws:
            await ws.send("ping")
            await ws.recv()
            if ending == "app":
                await ws.send("close:4001:app says bye")
            else:
                await database_sync_to_async(runtime.change)(principal, instance, "stop")
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), timeout=20)

    asyncio.run(scenario())
    records = eventually(lambda: (found := socket_records(instance)) and len(found) == 2 and found)
    closed = records[-1]
    assert closed.action == DISCONNECT
    assert (closed.details["closed_by"], closed.details["close_code"]) == (
        {"app": ("app", 4001), "platform": ("platform", 4403)}[ending]
    )
