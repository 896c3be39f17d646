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

redis-py's asyncio connections pack commands in Python, its synchronous ones with
hiredis's packer when hiredis is installed (it is: ``redis[hiredis]``); ``packed_by_hiredis``
gives a pool's connections the synchronous ones' packer. The ASGI proxy packs a script
call of a dozen arguments per request, and packing it in Python was a twentieth of the
proxy's time (decision 0069).
"""

from __future__ import annotations

import asyncio
import functools

from channels_redis.core import RedisChannelLayer as LibraryRedisChannelLayer
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.connection import HiredisRespSerializer


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


class _PackedByHiredis:
    _packer = HiredisRespSerializer()

    def pack_command(self, *args) -> list[bytes]:
        return self._packer.pack(*args)


@functools.cache
def _mixed(mixin: type, connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    return type(connection_class.__name__, (mixin, connection_class), {})


def cancellable(pool: ConnectionPool) -> ConnectionPool:
    """``pool``, opening connections of its own class (TCP, TLS, Unix socket, Sentinel)
    that raise a cancellation ``asyncio.wait_for`` dropped."""
    pool.connection_class = _mixed(_RaisesDroppedCancellation, pool.connection_class)
    return pool


def packed_by_hiredis(pool: ConnectionPool) -> ConnectionPool:
    """``pool``, opening connections of its own class that pack commands with hiredis."""
    pool.connection_class = _mixed(_PackedByHiredis, pool.connection_class)
    return pool


class RedisChannelLayer(LibraryRedisChannelLayer):
    """channels_redis' layer on ``cancellable`` pools."""

    def create_pool(self, index):
        return cancellable(super().create_pool(index))
