"""Concurrent connections per app instance and per user (HTTP requests in flight
and open WebSockets), counted in Redis when there is one, so every proxy process
shares the count, and in process on the embedded default.

Each key gets an expiry on every increment: a process that dies holding
connections leaks its counts only until then.
"""

from __future__ import annotations

import asyncio
import weakref

from django.conf import settings

from apps.proxy.access import Target

_EXPIRY_SECONDS = 3600
_local: dict[str, int] = {}
_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _keys(target: Target, user_id) -> tuple[str, str]:
    return f"gpuaas:proxy:conn:inst:{target.instance_id}", f"gpuaas:proxy:conn:user:{user_id}"


def _redis():
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        from redis.asyncio import Redis

        client = _clients[loop] = Redis.from_url(settings.REDIS_URL)
    return client


async def acquire(target: Target, user_id) -> tuple[str, str] | None:
    """Count one more connection; None (and nothing counted) when a limit is reached."""
    keys = _keys(target, user_id)
    if settings.REDIS_URL:
        pipe = _redis().pipeline(transaction=False)
        for key in keys:
            pipe.incr(key)
            pipe.expire(key, _EXPIRY_SECONDS)
        instance_count, _, user_count, _ = await pipe.execute()
    else:
        instance_count = _local[keys[0]] = _local.get(keys[0], 0) + 1
        user_count = _local[keys[1]] = _local.get(keys[1], 0) + 1
    if instance_count > target.limit_per_instance or user_count > target.limit_per_user:
        await release(keys)
        return None
    return keys


async def release(keys: tuple[str, str]) -> None:
    if settings.REDIS_URL:
        pipe = _redis().pipeline(transaction=False)
        for key in keys:
            pipe.decr(key)
        await pipe.execute()
        return
    for key in keys:
        left = _local.get(key, 1) - 1
        if left > 0:
            _local[key] = left
        else:
            _local.pop(key, None)
