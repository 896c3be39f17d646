"""What only the ASGI proxy does on the HTTP path, through real sockets: the portal
under uvicorn, the app in its own process (``tests.support.upstream``), PostgreSQL and
Redis as in production. What both data planes do is in ``test_data_planes.py``."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from apps.proxy import access
from apps.proxy.dataplane import limits
from tests.support.proxy import browser, open_session, route_url

pytestmark = pytest.mark.django_db(transaction=True)


# --- limits -------------------------------------------------------------------------------


def test_a_burst_of_connections_is_counted_and_given_back_in_full(settings, launch, owner):
    # More at once than a client's connection pool would hold (redis-py's: 100): a count
    # that failed to go back would refuse this person for an hour.
    settings.PROXY_MAX_CONNECTIONS_PER_INSTANCE = settings.PROXY_MAX_CONNECTIONS_PER_USER = 300
    instance = launch(limits={"per_instance": 300, "per_user": 300})
    url = httpx.URL(route_url(instance))

    async def burst(target) -> list:
        assert target is not None
        assert target.limit_per_instance == target.limit_per_user == 300
        url = settings.REDIS_URL
        acquired = await asyncio.gather(*(limits.acquire(url, target, owner.pk) for _ in range(300)))
        held = [count for count, _ in acquired]
        for count in held:
            if count:
                limits.release(count)
        return held

    async def twice() -> tuple[list, list]:
        target = await access.resolve(url.host + (f":{url.port}" if url.port else ""), url.path)
        return await burst(target), await burst(target)

    first, second = asyncio.run(twice())
    # Every one counted, and every count given back: the second burst fits again.
    assert len(first) == 300
    assert all(first)
    assert all(second)


# --- when the app is not there ----------------------------------------------------------------


def test_an_app_that_does_not_accept_connections_is_a_504(settings, launch, proxy_server, owner):
    settings.PROXY_UPSTREAM_CONNECT_SECONDS = 0.5
    # A listener whose accept queue is full: further connection attempts hang.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        instance = launch(port=port)
        with browser(proxy_server, open_session(proxy_server, owner, instance)) as client:
            page = client.get(route_url(instance, "echo"))
        assert page.status_code == 504
        assert "did not answer in time" in page.text
    finally:
        for sock in (*fillers, listener):
            sock.close()
