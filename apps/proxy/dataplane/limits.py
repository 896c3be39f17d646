"""Concurrent connections per app instance and per user (HTTP requests in flight
and open WebSockets), counted in the cache's Redis when there is one, so every
proxy process shares the count, and in process on the embedded default.

One command each way: a script counts the connection on both keys only if both
stay within their limits (and reads the request's decision keys in the same
command, ``apps.proxy.access.admit``), another gives it back: the counts given back
in one turn of the event loop, together.
Each key gets an expiry on every count: a process that dies holding connections
leaks its counts only until then.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, NamedTuple

from apps.proxy import redis_client
from apps.proxy.perloop import PerLoop

if TYPE_CHECKING:
    from apps.proxy.access import Target

_EXPIRY_SECONDS = 3600
# KEYS: the instance's and the user's counter, then any keys to read; ARGV: the two
# limits, the expiry. {1, values} when counted on both, {0, values} (and nothing
# counted) when either is full.
_ACQUIRE = """
local counted = 1
local instance = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local user = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
if instance > tonumber(ARGV[1]) or user > tonumber(ARGV[2]) then
    redis.call('DECR', KEYS[1])
    redis.call('DECR', KEYS[2])
    counted = 0
end
if #KEYS > 2 then
    return {counted, redis.call('MGET', unpack(KEYS, 3))}
end
return {counted, {}}
"""
# KEYS: counters; ARGV: how many to give back on each.
_RELEASE = "for i, key in ipairs(KEYS) do redis.call('DECRBY', key, ARGV[i]) end"
_local: dict[str, int] = {}
_given_back: PerLoop[dict[str, Counter]] = PerLoop(dict)


class Count(NamedTuple):
    """A connection counted: what gives it back."""

    redis_url: str | None
    instance_key: str
    user_key: str


async def acquire(
    redis_url: str | None, target: Target, user_id, read: tuple = ()
) -> tuple[Count | None, list]:
    """Count one more connection (None, and nothing counted, when a limit is reached),
    and the values of the Redis keys ``read``, read in the same command."""
    count = Count(
        redis_url, f"gpuaas:proxy:conn:inst:{target.instance_id}", f"gpuaas:proxy:conn:user:{user_id}"
    )
    if redis_url:
        counted, values = await redis_client.run_script(
            redis_url,
            _ACQUIRE,
            keys=[count.instance_key, count.user_key, *read],
            args=[target.limit_per_instance, target.limit_per_user, _EXPIRY_SECONDS],
        )
        return (count if counted else None), values
    instance_count = _local.get(count.instance_key, 0) + 1
    user_count = _local.get(count.user_key, 0) + 1
    if instance_count > target.limit_per_instance or user_count > target.limit_per_user:
        return None, []
    _local[count.instance_key], _local[count.user_key] = instance_count, user_count
    return count, []


def release(count: Count) -> None:
    """Give a connection back. Not awaited: the request is over."""
    if count.redis_url:
        pending = _given_back.get()
        given = pending.get(count.redis_url)
        if given is None:
            given = pending[count.redis_url] = Counter()
            asyncio.get_running_loop().call_soon(_give_back, pending, count.redis_url)
        given[count.instance_key] += 1
        given[count.user_key] += 1
        return
    for key in (count.instance_key, count.user_key):
        left = _local.get(key, 1) - 1
        if left > 0:
            _local[key] = left
        else:
            _local.pop(key, None)


def _give_back(pending: dict[str, Counter], redis_url: str) -> None:
    given = pending.pop(redis_url)
    redis_client.run_script_unawaited(
        redis_url,
        _RELEASE,
        keys=list(given),
        args=list(given.values()),
        failed="proxied connections' counts were not given back (they expire in an hour)",
    )
