"""Live updates sent from sync code reach the pages that listen, also from a forked
Celery worker (the prefork pool forks after the parent may have sent)."""

from __future__ import annotations

import os
import uuid

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.core.broadcast import group_send


def listening(group: str) -> str:
    # A named channel, not new_channel()'s process-local one, which only the loop that
    # made it can read.
    channel = f"test.{uuid.uuid4().hex}"
    async_to_sync(get_channel_layer().group_add)(group, channel)
    return channel


def received(channel: str, count: int) -> list[dict]:
    """The next ``count`` messages, read on one loop (channels_redis mixes up reads of
    one channel from several loops)."""

    async def read() -> list[dict]:
        layer = get_channel_layer()
        return [await layer.receive(channel) for _ in range(count)]

    return async_to_sync(read)()


def test_updates_reach_the_group_one_after_another():
    group = f"test.{uuid.uuid4().hex}"
    channel = listening(group)
    for n in range(3):
        group_send(group, {"type": "test.update", "n": n})
    assert [message["n"] for message in received(channel, 3)] == [0, 1, 2]


def test_a_forked_worker_sends_on_a_loop_of_its_own():
    group = f"test.{uuid.uuid4().hex}"
    channel = listening(group)
    group_send(group, {"type": "test.update", "from": "parent"})  # the parent's loop runs
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports by its exit status
        try:
            group_send(group, {"type": "test.update", "from": "child"})
        except BaseException:  # noqa: BLE001 - a forked child exits; it must never return into pytest
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    group_send(group, {"type": "test.update", "from": "parent again"})
    assert [message["from"] for message in received(channel, 3)] == ["parent", "child", "parent again"]


def test_a_send_after_redis_restarted_goes_out_on_a_new_connection(settings, redis_server):
    """The sends' loop keeps its connections: the one Redis dropped when it restarted is
    retried once on a new one, as the cache's are, rather than failing the request whose
    commit sent it."""
    layer = settings.CHANNEL_LAYERS["default"]
    host = {**layer["CONFIG"]["hosts"][0], "address": redis_server.url}
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": {"hosts": [host]}}}
    group = f"test.{uuid.uuid4().hex}"
    group_send(group, {"type": "test.update", "n": 0})  # the loop's connection, made

    redis_server.restart()
    redis_server.wait_ready()
    channel = listening(group)  # the restarted Redis is empty: the group is joined again
    group_send(group, {"type": "test.update", "n": 1})
    assert [message["n"] for message in received(channel, 1)] == [1]
