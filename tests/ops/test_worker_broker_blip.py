"""A Celery worker (prefork, as production runs it) lives through its broker going
away and coming back (Redis restarted empty, RabbitMQ's connection cut): it
reconnects by itself and takes new work, no supervisor needed. (kombu's Redis transport once died here with
``AttributeError: 'NoneType' object has no attribute 'hostname'`` in
``restore_unacked``.)"""

from __future__ import annotations

import time

import pytest
from celery import Celery
from django.db import connection

from tests.support.processes import PRODUCTION_ENV, CeleryWorker, CuttablePath

pytestmark = [pytest.mark.heavy, pytest.mark.production]

# A worker reconnects with its own backoff (about 2 s, then more); ample on a loaded machine.
RECONNECT_PATIENCE_SECONDS = 60


class RedisBroker:
    """The private Redis, killed and started again empty."""

    def __init__(self, server):
        self.server, self.url = server, server.url

    def down(self):
        self.server.stop()

    def up(self):
        self.server.restart()
        self.server.wait_ready()


class RabbitBroker:
    """The machine's RabbitMQ behind a path that is cut (a broker gone, as the worker sees it)."""

    def __init__(self, vhost: str):
        self.path = CuttablePath(("127.0.0.1", 5672))
        self.url = f"amqp://guest:guest@127.0.0.1:{self.path.port}/{vhost}"

    def down(self):
        self.path.cut()

    def up(self):
        self.path.restore()


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request, redis_server):
    if request.param == "redis":
        yield RedisBroker(redis_server)
        return
    rabbit = RabbitBroker(request.getfixturevalue("vhost"))
    yield rabbit
    rabbit.path.cut()


@pytest.fixture
def worker(transactional_db, broker, redis_server, tmp_path):
    db = connection.settings_dict
    env = {
        **PRODUCTION_ENV,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_server.url,
        "GPUAAS_BROKER_URL": broker.url,
        "GPUAAS_VAR_DIR": str(tmp_path / "var"),
    }
    process = CeleryWorker(env, tmp_path / "worker.log", concurrency=1, pool="prefork", name="blip")
    yield process
    process.stop()


@pytest.fixture
def app(broker, redis_server):
    """A client of the same broker, sending by task name as the portal does."""
    # Not the process's current app: the tests after this one in the worker use the portal's.
    client = Celery(broker=broker.url, backend=redis_server.url, set_as_current=False)
    client.conf.broker_connection_retry_on_startup = True
    yield client
    client.close()


def _purge(app):
    # disable_sync_subtasks: an in-process worker an earlier test ran in this pytest
    # process (start_worker's solo pool) leaves Celery's process-wide "inside a task"
    # flag set, and get() would then refuse to wait; this caller is never a task.
    result = app.send_task("apps.core.tasks.purge_idempotency_records")
    return result.get(timeout=RECONNECT_PATIENCE_SECONDS, disable_sync_subtasks=False)


def test_a_worker_reconnects_after_its_broker_goes_and_returns(worker, app, broker):
    worker.wait_ready(app)
    assert _purge(app) == 0

    broker.down()
    time.sleep(3)  # long enough for the worker to see its connection go and begin reconnecting
    worker.check_alive("celery worker with its broker down")
    broker.up()

    # A Redis broker came back empty (queues and bindings gone): the worker declares them again.
    assert _purge(app) == 0
    worker.check_alive("celery worker after its broker returned")
    assert "Unrecoverable error" not in worker.log_path.read_text()
