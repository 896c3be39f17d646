"""The ASGI proxy's Redis (apps.proxy.redis_client: redis.asyncio) against the real
Redis server, and against one that stops answering without closing."""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading

import pytest
import redis as redis_py
from django.conf import settings
from redis.exceptions import NoPermissionError, ResponseError

from apps.proxy import redis_client
from tests.support.processes import free_port
from tests.support.proxy import browser, open_session, route_url


@pytest.fixture
def url():
    return settings.REDIS_URL


@pytest.fixture
def direct(url):
    client = redis_py.Redis.from_url(url)
    yield client
    client.close()


@pytest.fixture
def stalled():
    """A server that accepts connections and never answers: a Redis that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    listener.close()
    for conn in held:
        conn.close()


def key() -> str:
    return f"gpuaas:test:redis-client:{secrets.token_hex(8)}"


def test_concurrent_callers_each_get_their_own_reply(url, direct):
    counters = [key() for _ in range(50)]

    async def run():
        increments = [redis_client.call(url, "INCRBY", name, n) for n, name in enumerate(counters, 1)]
        read = redis_client.call(url, "MGET", counters[0], "gpuaas:test:redis-client:absent", counters[-1])
        script = redis_client.run_script(url, "return {KEYS[1], tonumber(ARGV[1]) * 2}", ["k"], [21])
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
        wrong = redis_client.call(url, "INCR", "gpuaas:test:redis-client:text")
        right = redis_client.call(url, "INCR", name)
        return await asyncio.gather(wrong, right, return_exceptions=True)

    direct.set("gpuaas:test:redis-client:text", "not a number")
    try:
        wrong, right = asyncio.run(run())
        assert isinstance(wrong, ResponseError)
        assert "not an integer" in str(wrong)
        assert right == 1
    finally:
        direct.delete(name, "gpuaas:test:redis-client:text")


def test_many_scripts_in_flight_each_get_their_own_reply_or_error(url, direct):
    # Scripts asked for together go out in shared pipelines; one that Redis refuses
    # fails its own caller only, and the counts given back without waiting all arrive.
    counters = [key() for _ in range(200)]
    incr = "return redis.call('INCRBY', KEYS[1], ARGV[1])"

    async def run():
        replies = [redis_client.run_script(url, incr, [name], [n]) for n, name in enumerate(counters, 1)]
        wrong = redis_client.run_script(url, incr, ["gpuaas:test:redis-client:text"], [1])
        results = await asyncio.gather(*replies, wrong, return_exceptions=True)
        for name in counters:
            redis_client.run_script_unawaited(url, incr, [name], [-1], failed="not given back")
        # Pipelines go out in order: a script asked for now is answered after them.
        await redis_client.run_script(url, "return 1", [], [])
        return results

    direct.set("gpuaas:test:redis-client:text", "not a number")
    try:
        *replies, wrong = asyncio.run(run())
        assert replies == list(range(1, 201))
        assert isinstance(wrong, ResponseError)
        assert [int(value) for value in direct.mget(counters)] == list(range(200))
    finally:
        direct.delete(*counters, "gpuaas:test:redis-client:text")


def test_scripts_waiting_on_a_server_that_stops_answering_all_fail(settings, stalled):
    settings.PROXY_REDIS_TIMEOUT_SECONDS = 0.5

    async def run():
        waiting = [redis_client.run_script(stalled, "return 1", [key()], []) for _ in range(20)]
        # The outer bound only keeps a hanging client from hanging the test.
        return await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), timeout=30)

    assert all(isinstance(reply, redis_client.Unavailable) for reply in asyncio.run(run()))


def test_a_script_runs_again_after_redis_forgot_it(url, direct):
    source = f"return '{key()}'"

    async def twice():
        first = await redis_client.run_script(url, source, [], [])
        direct.script_flush()  # a restarted Redis knows no script: EVALSHA answers NOSCRIPT
        return first, await redis_client.run_script(url, source, [], [])

    first, second = asyncio.run(twice())
    assert first == second == source.split("'")[1].encode()


def test_credentials_and_database_in_the_url_are_used(url, direct):
    user, password = f"gpuaas-test-{secrets.token_hex(4)}", secrets.token_urlsafe(12)
    direct.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["gpuaas:test:*"], commands=["+@all"]
    )
    server, _, _ = url.rpartition("/")
    host = server.removeprefix("redis://")
    name = key()
    try:
        assert asyncio.run(redis_client.call(f"redis://{user}:{password}@{host}/15", "SET", name, "x"))
        assert redis_py.Redis.from_url(f"{server}/15").get(name) == b"x"
        with pytest.raises(NoPermissionError):
            asyncio.run(redis_client.call(f"redis://{user}:{password}@{host}/15", "SET", "elsewhere", "x"))
    finally:
        direct.acl_deluser(user)
        redis_py.Redis.from_url(f"{server}/15").delete(name)


def test_an_unreachable_server_is_unavailable():
    with pytest.raises(redis_client.Unavailable):
        asyncio.run(redis_client.call(f"redis://127.0.0.1:{free_port()}/0", "PING"))


def test_a_server_that_stops_answering_fails_the_command_in_its_timeout(settings, stalled):
    settings.PROXY_REDIS_TIMEOUT_SECONDS = 0.5

    async def run():
        # The outer bound only keeps a hanging client from hanging the test.
        return await asyncio.wait_for(redis_client.call(stalled, "PING"), timeout=30)

    with pytest.raises(redis_client.Unavailable):
        asyncio.run(run())


@pytest.mark.django_db(transaction=True)
def test_a_request_while_redis_hangs_gets_a_clear_503(settings, stalled, launch, proxy_server, owner):
    instance = launch()
    cookie = open_session(proxy_server, owner, instance)  # the session is written while Redis answers
    settings.PROXY_REDIS_TIMEOUT_SECONDS = 0.5
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": stalled}
    }
    with browser(proxy_server, cookie) as client:
        page = client.get(route_url(instance, "echo"))
    assert page.status_code == 503
    assert page.headers["retry-after"] == "5"
    assert "cannot check your access" in page.text
