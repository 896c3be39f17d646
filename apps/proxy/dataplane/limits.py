"""Concurrent connections per app instance and per user (HTTP requests in flight
and open WebSockets), counted in Redis when there is one, so every proxy process
shares the count, and in process on the embedded default.

One command each way: a script counts the connection on both keys only if both
stay within their limits, another gives it back (in the round trip of
``apps.proxy.access.redis`` they share with other requests). Each key gets an
expiry on every count: a process that dies holding connections leaks its counts
only until then.
"""

from __future__ import annotations

from django.conf import settings

from apps.proxy.access import Target, redis

_EXPIRY_SECONDS = 3600
# KEYS: the instance's and the user's counter; ARGV: their limits, the expiry.
# 1 when counted on both, 0 (and nothing counted) when either is full.
_ACQUIRE = """
local instance = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local user = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
if instance > tonumber(ARGV[1]) or user > tonumber(ARGV[2]) then
    redis.call('DECR', KEYS[1])
    redis.call('DECR', KEYS[2])
    return 0
end
return 1
"""
_RELEASE = "redis.call('DECR', KEYS[1]) redis.call('DECR', KEYS[2])"
_local: dict[str, int] = {}


def _keys(target: Target, user_id) -> tuple[str, str]:
    return f"gpuaas:proxy:conn:inst:{target.instance_id}", f"gpuaas:proxy:conn:user:{user_id}"


async def acquire(target: Target, user_id) -> tuple[str, str] | None:
    """Count one more connection; None (and nothing counted) when a limit is reached."""
    keys = _keys(target, user_id)
    if settings.REDIS_URL:
        counted = await redis(
            settings.REDIS_URL,
            "EVAL",
            _ACQUIRE,
            2,
            *keys,
            target.limit_per_instance,
            target.limit_per_user,
            _EXPIRY_SECONDS,
        )
        return keys if counted else None
    instance_count = _local.get(keys[0], 0) + 1
    user_count = _local.get(keys[1], 0) + 1
    if instance_count > target.limit_per_instance or user_count > target.limit_per_user:
        return None
    _local[keys[0]], _local[keys[1]] = instance_count, user_count
    return keys


async def release(keys: tuple[str, str]) -> None:
    if settings.REDIS_URL:
        await redis(settings.REDIS_URL, "EVAL", _RELEASE, 2, *keys)
        return
    for key in keys:
        left = _local.get(key, 1) - 1
        if left > 0:
            _local[key] = left
        else:
            _local.pop(key, None)
