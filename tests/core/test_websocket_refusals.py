"""A refused WebSocket leaves nothing running in the server: neither a task nor a
connection (each left behind held a Redis connection for ever and kept the server
from shutting down)."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import channel_layers

from tests.support.pages import handshake
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REFUSALS = 10


def refuse(portal, project, headers: dict) -> list:
    url = f"ws://127.0.0.1:{portal.port}/ws/projects/{project.pk}/allocations/"

    async def scenario():
        return [await handshake(url, headers) for _ in range(REFUSALS)]

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Origin": "http://evil.example"}, id="foreign-origin"),
        pytest.param(None, id="anonymous"),  # the consumer refuses, after its policy check
    ],
)
def test_refused_handshakes_leave_nothing_running(portal, project, headers):
    assert refuse(portal, project, headers or {"Origin": portal.url}) == [403] * REFUSALS
    wait_for(lambda: portal.busy() == (0, 0), timeout=15, what="nothing running in the server")


def test_a_cancelled_channel_layer_receive_ends():
    # A consumer that ends cancels its channel-layer receive; the cancellation must end
    # it wherever it lands, also in the loop step where a command has just been sent.
    async def scenario():
        layer = channel_layers.make_backend("default")
        await layer.send("warm-up", {"type": "warm.up"})  # a connection is open
        outcomes = []
        for steps in range(40):
            receive = asyncio.ensure_future(layer.receive(await layer.new_channel()))
            for _ in range(steps):
                await asyncio.sleep(0)
            receive.cancel()
            await asyncio.wait([receive], timeout=10)
            outcomes.append("cancelled" if receive.cancelled() else "still receiving")
        await layer.flush()
        return outcomes

    assert asyncio.run(scenario()) == ["cancelled"] * 40
