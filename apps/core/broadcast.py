"""Channel-layer messages sent from sync code (Celery tasks, views, on_commit hooks).

``async_to_sync`` in a thread with no event loop starts a new loop for every call,
and channels_redis keeps its connections per loop: each live update opened a new
Redis connection, about 5 ms of CPU, half of a worker's CPU per allocation
(docs/performance.md). Here every send of a process runs on one loop, in a thread of
its own, started on first use and again in a forked child (Celery's prefork pool),
so the connections are kept: about 0.7 ms a send.

The in-memory layer of the embedded default is the exception: its consumers' queues
belong to the web server's loop, which ``async_to_sync`` reaches from a request's
thread, so it keeps that path.
"""

from __future__ import annotations

import asyncio
import os
import threading

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

SEND_TIMEOUT_SECONDS = 5.0

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _forget_loop() -> None:
    """In a forked child: the parent's loop thread did not come along."""
    global _loop, _lock
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_loop)


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="channel-layer-sends", daemon=True).start()
        return _loop


def group_send(group: str, message: dict) -> None:
    """Send ``message`` to ``group``, waiting until the layer has it (at most 5 s);
    raises what the layer raises. Nothing happens without a channel layer."""
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        async_to_sync(layer.group_send)(group, message)
        return
    future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), _running_loop())
    try:
        future.result(timeout=SEND_TIMEOUT_SECONDS)
    except TimeoutError:
        future.cancel()
        raise


def after_commit(group: str, message: dict) -> None:
    """``group_send`` once the transaction commits. Robust: a layer that cannot take it
    is logged and what committed stands, the request answering as it would have (a 503
    would have the client retry work that was done); receivers catch up on their own
    (pages at their next update, an agent at its long poll's timeout)."""
    transaction.on_commit(lambda: group_send(group, message), robust=True)
