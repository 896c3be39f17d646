"""Fixtures of the tests that run the production processes for real."""

from __future__ import annotations

import pytest

from tests.support.processes import rabbitmq_vhost


@pytest.fixture(scope="module")
def vhost():
    """A RabbitMQ virtual host of the module's own (``rabbitmq_vhost``)."""
    with rabbitmq_vhost() as name:
        yield name
