"""redis.asyncio connection pools whose commands a cancellation always stops, and the
channel layer built on them.

CPython 3.11's ``asyncio.wait_for`` drops a cancellation that arrives in the loop
iteration where the awaited operation finishes (gh-86296; 3.12 rewrote ``wait_for``).
redis-py sends every command under ``wait_for`` once a socket timeout is set, and the
pools here need one (a Redis that stops answering must fail a command, and redis-py 8
would otherwise time out the channel layer's 5 s BZPOPMIN). A dropped cancellation
lets the cancelled task go on: a Channels consumer that ends cancels its channel-layer
receive, which then loops on BZPOPMIN for ever, holding a task and a Redis connection
and keeping the server from shutting down. A refused handshake (the consumer closes as
it starts, while that receive sends its first command) hit it every time.
"""

from __future__ import annotations

import asyncio
import functools

from channels_redis.core import RedisChannelLayer as LibraryRedisChannelLayer
from redis.asyncio.connection import AbstractConnection, ConnectionPool


class _RaisesDroppedCancellation:
    async def send_packed_command(self, command, check_health: bool = True) -> None:
        task = asyncio.current_task()
        requested = task.cancelling() if task is not None else 0
        await super().send_packed_command(command, check_health)
        if task is not None and task.cancelling() > requested:
            # The command went out but its reply will not be read: the connection
            # cannot serve the next command.
            await self.disconnect(nowait=True)
            raise asyncio.CancelledError


@functools.cache
def _cancellable(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    return type(connection_class.__name__, (_RaisesDroppedCancellation, connection_class), {})


def cancellable(pool: ConnectionPool) -> ConnectionPool:
    """``pool``, opening connections of its own class (TCP, TLS, Unix socket, Sentinel)
    that raise a cancellation ``asyncio.wait_for`` dropped."""
    pool.connection_class = _cancellable(pool.connection_class)
    return pool


class RedisChannelLayer(LibraryRedisChannelLayer):
    """channels_redis' layer on ``cancellable`` pools."""

    def create_pool(self, index):
        return cancellable(super().create_pool(index))
