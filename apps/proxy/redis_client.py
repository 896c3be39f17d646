"""The ASGI proxy's Redis: redis.asyncio (with hiredis), one client per event loop and URL.

Connections belong to the event loop that opened them (``PerLoop``). Every request
reads its decision and counts its connection here, so a Redis that stops answering
must fail requests quickly rather than hold them: each command has a timeout, and
the pool is bounded (a burst waits for a connection for as long as a command may
take, then fails), so a thousand WebSockets closing at once cannot open a thousand
connections. The callers answer ``Unavailable`` with 503. A cancelled command stops
(``cancellable``): the socket watchers loop on Redis until they are cancelled.

The counting scripts of every request go out together (``_Batch``): the scripts asked
for while one pipeline is out go in the next, so under load a round trip, a pool
checkout and a socket write serve many requests (decision 0041).
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as redis
from django.conf import settings
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from apps.core.redis_pools import cancellable, packed_by_hiredis
from apps.proxy.perloop import PerLoop

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """Redis did not answer in time, or cannot be reached."""


_clients: PerLoop[dict[str, redis.Redis]] = PerLoop(dict)
_scripts: PerLoop[dict[tuple[str, str], AsyncScript]] = PerLoop(dict)
_batches: PerLoop[dict[str, _Batch]] = PerLoop(dict)


def client(url: str) -> redis.Redis:
    clients = _clients.get()
    found = clients.get(url)
    if found is None:
        timeout = settings.PROXY_REDIS_TIMEOUT_SECONDS
        pool = cancellable(
            packed_by_hiredis(
                redis.BlockingConnectionPool.from_url(
                    url,
                    max_connections=settings.PROXY_REDIS_CONNECTIONS,
                    timeout=timeout,
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                )
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


class _Batch:
    """The scripts of one event loop for one Redis, sent as pipelines, one out at a time."""

    def __init__(self, url: str):
        self.url = url
        self.queued: list[tuple[AsyncScript, list, list, asyncio.Future | None, str]] = []
        self.sender: asyncio.Task | None = None  # kept: the loop holds tasks only weakly

    def add(
        self, script: AsyncScript, keys: list, args: list, reply: asyncio.Future | None, failed: str
    ) -> None:
        self.queued.append((script, keys, args, reply, failed))
        if self.sender is None:
            self.sender = asyncio.ensure_future(self._send_all())

    async def _send_all(self) -> None:
        try:
            while self.queued:
                batch, self.queued = self.queued, []
                await self._send(batch)
        finally:
            self.sender = None

    async def _send(self, batch: list) -> None:
        try:
            pipe = client(self.url).pipeline(transaction=False)
            for script, keys, args, _, _ in batch:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            replies = [Unavailable(f"Redis did not answer: {exc}") for _ in batch]
        except Exception as exc:  # noqa: BLE001 - each waiting caller gets it, as its reply
            replies = [exc for _ in batch]
        for (script, keys, args, reply, failed), answer in zip(batch, replies, strict=True):
            if isinstance(answer, NoScriptError):
                # Redis forgot the scripts (a restart, SCRIPT FLUSH): sent alone, which loads it.
                answer = await _again(script, keys, args)
            if reply is None:
                if isinstance(answer, Exception):
                    log.warning("%s: %s", failed, answer)
            elif reply.done():
                pass  # its request went away
            elif isinstance(answer, Exception):
                reply.set_exception(answer)
            else:
                reply.set_result(answer)


async def _again(script: AsyncScript, keys: list, args: list):
    try:
        return await script(keys=keys, args=args)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        return Unavailable(f"Redis did not answer: {exc}")
    except Exception as exc:  # noqa: BLE001 - handed to the script's caller, as a reply is
        return exc


def _batch(url: str, source: str) -> tuple[_Batch, AsyncScript]:
    scripts = _scripts.get()
    script = scripts.get((url, source))
    if script is None:
        script = scripts[(url, source)] = client(url).register_script(source)
    batches = _batches.get()
    batch = batches.get(url)
    if batch is None:
        batch = batches[url] = _Batch(url)
    return batch, script


async def run_script(url: str, source: str, keys: list, args: list):
    """A Lua script's reply, the script sent by its SHA once Redis knows it
    (``register_script``) in the next pipeline of this loop's scripts."""
    batch, script = _batch(url, source)
    reply = asyncio.get_running_loop().create_future()
    batch.add(script, keys, args, reply, "")
    return await reply


def run_script_unawaited(url: str, source: str, keys: list, args: list, failed: str) -> None:
    """Send a script and do not wait for it; log ``failed`` with the error if it fails."""
    batch, script = _batch(url, source)
    batch.add(script, keys, args, None, failed)
