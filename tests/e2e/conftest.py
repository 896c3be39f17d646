"""Browser tests: the portal served by uvicorn, driven in Debian's headless Chromium."""

from __future__ import annotations

import os

import pytest
from celery import signals
from celery.contrib.testing.worker import start_worker
from playwright.sync_api import sync_playwright

from gpuaas.celery import app as celery_app
from tests.support.servers import ThreadedUvicorn

# Playwright's sync API keeps an event loop in the test thread; the test's own ORM
# calls (factories, assertions) are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # A portal and its apps domain on one site, as in production (see test_jupyterlab_proxy).
    "--host-resolver-rules=MAP *.example.com 127.0.0.1",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def portal(transactional_db, settings):
    """The whole portal (HTTP and WebSocket) on a free loopback port."""
    server = ThreadedUvicorn().start()
    settings.ISSUER = server.url
    settings.CSRF_TRUSTED_ORIGINS = [server.url]
    yield server
    server.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.js_errors = errors
    yield page
    context.close()


def _keep_logging_as_configured(**kwargs) -> None:
    """A ``setup_logging`` receiver: Celery then leaves the process's logging alone
    (its test worker would set the root logger to ERROR for the rest of the session)."""


@pytest.fixture
def worker(portal, settings, monkeypatch):
    """A Celery worker thread on the test's Redis, while the test runs (stopped before the DB flush)."""
    settings.SIMULATED_STEP_SECONDS = 2.0  # MAAS deploy / release take visible time
    settings.PIPELINE_POLL_SECONDS = 0.2
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False
    for name in ("_MP_FORK_LOGLEVEL_", "_MP_FORK_LOGFILE_", "_MP_FORK_LOGFORMAT_"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # Celery sets them; restored afterwards
    signals.setup_logging.connect(_keep_logging_as_configured)
    try:
        with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
            yield
    finally:
        signals.setup_logging.disconnect(_keep_logging_as_configured)
        celery_app.conf.task_always_eager = eager
