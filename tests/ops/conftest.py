"""Fixtures of the tests that run the production processes for real."""

from __future__ import annotations

import pytest

from tests.support.processes import RedisServer, rabbitmq_vhost
from tests.support.servers import free_port


@pytest.fixture
def redis_server(tmp_path):
    """A private ``redis-server`` a test may kill and start again (``restart``)."""
    server = RedisServer(free_port(), tmp_path / "redis.log", str(tmp_path))
    server.wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vhost():
    """A RabbitMQ virtual host of the module's own (``rabbitmq_vhost``)."""
    with rabbitmq_vhost() as name:
        yield name
