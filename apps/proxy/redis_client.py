"""The ASGI proxy's Redis: redis.asyncio (with hiredis), one client per event loop and URL.

Connections belong to the event loop that opened them (``PerLoop``). Every request
reads its decision and counts its connection here, so a Redis that stops answering
must fail requests quickly rather than hold them: each command has a timeout, and
the pool is bounded (a burst waits for a connection for as long as a command may
take, then fails), so a thousand WebSockets closing at once cannot open a thousand
connections. The callers answer ``Unavailable`` with 503. A cancelled command stops
(``cancellable``): the socket watchers loop on Redis until they are cancelled.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as redis
from django.conf import settings
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from apps.core.redis_pools import cancellable
from apps.proxy.perloop import PerLoop

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """Redis did not answer in time, or cannot be reached."""


_clients: PerLoop[dict[str, redis.Redis]] = PerLoop(dict)
_scripts: PerLoop[dict[tuple[str, str], AsyncScript]] = PerLoop(dict)
# Commands sent without waiting for their reply (a count given back), kept until they
# finish: the event loop holds only weak references to tasks.
_unawaited: set[asyncio.Task] = set()


def client(url: str) -> redis.Redis:
    clients = _clients.get()
    found = clients.get(url)
    if found is None:
        timeout = settings.PROXY_REDIS_TIMEOUT_SECONDS
        pool = cancellable(
            redis.BlockingConnectionPool.from_url(
                url,
                max_connections=settings.PROXY_REDIS_CONNECTIONS,
                timeout=timeout,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
            )
        )
        found = clients[url] = redis.Redis(connection_pool=pool)
    return found


async def call(url: str, *command):
    """The reply to one Redis command (a ``redis.exceptions.ResponseError`` when Redis
    refuses that command)."""
    try:
        return await client(url).execute_command(*command)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise Unavailable(f"Redis did not answer: {exc}") from exc


async def run_script(url: str, source: str, keys: list, args: list):
    """A Lua script, sent by its SHA once Redis knows it (``register_script``)."""
    scripts = _scripts.get()
    script = scripts.get((url, source))
    if script is None:
        script = scripts[(url, source)] = client(url).register_script(source)
    try:
        return await script(keys=keys, args=args)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise Unavailable(f"Redis did not answer: {exc}") from exc


def run_script_unawaited(url: str, source: str, keys: list, args: list, failed: str) -> None:
    """Send a script and do not wait for it; log ``failed`` with the error if it fails."""
    task = asyncio.ensure_future(run_script(url, source, keys, args))
    _unawaited.add(task)
    task.add_done_callback(lambda done: _finished(done, failed))


def _finished(task: asyncio.Task, failed: str) -> None:
    _unawaited.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("%s: %s", failed, task.exception())
