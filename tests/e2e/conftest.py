"""Browser tests: the portal served by uvicorn, driven in Debian's headless Chromium."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import sync_playwright

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
