"""The proxy's Redis pipeline (apps.proxy.pipeline) against the real Redis server."""

from __future__ import annotations

import asyncio
import secrets

import pytest
import redis as redis_py
from django.conf import settings

from apps.proxy import pipeline


@pytest.fixture
def url():
    return settings.REDIS_URL


@pytest.fixture
def direct(url):
    client = redis_py.Redis.from_url(url)
    yield client
    client.close()


def key() -> str:
    return f"gpuaas:test:pipeline:{secrets.token_hex(8)}"


def test_concurrent_callers_each_get_their_own_reply(url, direct):
    counters = [key() for _ in range(50)]

    async def run():
        increments = [pipeline.call(url, "INCRBY", name, n) for n, name in enumerate(counters, 1)]
        read = pipeline.call(url, "MGET", counters[0], "gpuaas:test:pipeline:absent", counters[-1])
        script = pipeline.call(url, "EVAL", "return {KEYS[1], tonumber(ARGV[1]) * 2}", 1, "k", 21)
        return await asyncio.gather(*increments), await read, await script

    try:
        increments, read, script = asyncio.run(run())
        assert increments == list(range(1, 51))
        assert read == [b"1", None, b"50"]
        assert script == [b"k", 42]
        assert direct.get(counters[9]) == b"10"  # on the database the URL names
    finally:
        direct.delete(*counters)


def test_an_error_reply_fails_only_its_own_command(url, direct):
    name = key()

    async def run():
        wrong = pipeline.call(url, "INCR", "gpuaas:test:pipeline:text")
        right = pipeline.call(url, "INCR", name)
        return await asyncio.gather(wrong, right, return_exceptions=True)

    direct.set("gpuaas:test:pipeline:text", "not a number")
    try:
        wrong, right = asyncio.run(run())
        assert isinstance(wrong, pipeline.ReplyError) and "not an integer" in str(wrong)
        assert right == 1
    finally:
        direct.delete(name, "gpuaas:test:pipeline:text")


def test_replies_split_anywhere_are_put_back_together():
    reply = b"*3\r\n$5\r\nhello\r\n*2\r\n:7\r\n$-1\r\n+OK\r\n"
    for cut in range(1, len(reply)):
        buffer = bytearray(reply[:cut])
        found, position = pipeline.parse(buffer, 0)
        assert found is pipeline._INCOMPLETE and position == 0
        buffer += reply[cut:]
        assert pipeline.parse(buffer, 0) == ([b"hello", [7, None], b"OK"], len(reply))


def test_a_dropped_connection_fails_what_was_waiting_and_the_next_command_reconnects(url, direct):
    name = key()

    async def run():
        assert await pipeline.call(url, "CLIENT", "SETNAME", "gpuaas-pipeline-test") == b"OK"
        client_id = await pipeline.call(url, "CLIENT", "ID")
        # Blocked on a list nobody pushes to, then cut off by the server.
        waiting = pipeline.call(url, "BLPOP", name, 30)
        await asyncio.sleep(0.1)
        direct.client_kill_filter(_id=client_id)
        with pytest.raises(ConnectionError):
            await waiting
        return await pipeline.call(url, "INCR", name), await pipeline.call(url, "CLIENT", "ID")

    try:
        counted, new_id = asyncio.run(run())
        assert counted == 1 and direct.get(name) == b"1"
        assert new_id
    finally:
        direct.delete(name)


def test_credentials_and_database_in_the_url_are_used(url, direct):
    user, password = f"gpuaas-test-{secrets.token_hex(4)}", secrets.token_urlsafe(12)
    direct.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["gpuaas:test:*"], commands=["+@all"]
    )
    server, _, _ = url.rpartition("/")
    host = server.removeprefix("redis://")
    name = key()
    try:
        reply = asyncio.run(_one(f"redis://{user}:{password}@{host}/15", "SET", name, "x"))
        assert reply == b"OK"
        assert redis_py.Redis.from_url(f"{server}/15").get(name) == b"x"
        with pytest.raises(pipeline.ReplyError, match="NOPERM"):
            asyncio.run(_one(f"redis://{user}:{password}@{host}/15", "SET", "elsewhere", "x"))
        # Refused credentials: nothing is sent as Redis's default user instead.
        with pytest.raises(ConnectionError, match="WRONGPASS"):
            asyncio.run(_one(f"redis://{user}:wrong@{host}/15", "DEL", name))
        assert redis_py.Redis.from_url(f"{server}/15").get(name) == b"x"
    finally:
        direct.acl_deluser(user)
        redis_py.Redis.from_url(f"{server}/15").delete(name)


def test_an_unreachable_server_is_a_connection_error():
    from tests.support.servers import free_port

    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1"):
        asyncio.run(_one(f"redis://127.0.0.1:{free_port()}/0", "PING"))


async def _one(url: str, *command):
    return await pipeline.call(url, *command)
