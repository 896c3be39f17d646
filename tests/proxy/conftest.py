"""The proxy's tests commit (the portal serving them runs in a thread of its own) and
launch apps on an ACTIVE allocation, which ``tests/conftest.py``'s fixtures make through
the allocation pipeline: for each test, that was half of its setup. Here it is made once
per module and worker and its rows put back for each test (``kept``); and the portal
under uvicorn is started once per module."""

from __future__ import annotations

import pytest
from django.test import TestCase

from tests.support.proxy import Launchpad, launchpad
from tests.support.servers import ThreadedUvicorn
from tests.support.snapshots import Kept, fields_as_fixtures, kept, restored


@pytest.fixture(scope="module")
def _launchpad(django_db_setup, django_db_blocker) -> Kept:
    return kept(django_db_blocker, lambda: launchpad(TestCase.captureOnCommitCallbacks))


@pytest.fixture
def _launchpad_rows(db, _launchpad) -> Launchpad:
    return restored(_launchpad)


globals().update(
    fields_as_fixtures(
        "_launchpad_rows",
        active_allocation="allocation",
        ready_tenant="tenant",
        **{name: name for name in ("tenant", "project", "owner", "allocator", "flavor", "nodes")},
    )
)


@pytest.fixture(scope="module")
def _proxy_servers():
    started: list[ThreadedUvicorn] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def proxy_server(settings, _proxy_servers):
    """The portal's ASGI application under uvicorn, the module's (another once a test
    stopped it); the issuer is its address, so routes are planned on it."""
    if not _proxy_servers or not _proxy_servers[-1].thread.is_alive():
        _proxy_servers.append(ThreadedUvicorn().start())
    settings.ISSUER = _proxy_servers[-1].url
    return _proxy_servers[-1]
