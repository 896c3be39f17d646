"""The 500 page tells the user what to report (time, correlation id). Error pages
under the ASGI server give their database connection back: a signed-in
browser asking for pages that do not exist once took one pooled connection per
executor thread for good (Django renders error pages off the request's thread)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
import pytest
from django.db import connection
from django.test import Client

from tests.support.members import member
from tests.support.pages import session_cookie
from tests.support.servers import ThreadedUvicorn

pytestmark = pytest.mark.django_db(transaction=True)


def checked_out() -> int:
    """Pooled connections in use in this process, this test's own given back first."""
    connection.close()
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def test_not_found_pages_for_a_signed_in_user_leave_the_pool_whole(tenant):
    user = member("tenant_admin", tenant=tenant)
    before = checked_out()
    server = ThreadedUvicorn().start()
    try:
        with httpx.Client(base_url=server.url, headers={"Cookie": session_cookie(user)}) as browser:
            pages = [browser.get(f"/no/such/page/{n}/") for n in range(40)]
            dashboard = browser.get("/")
    finally:
        server.stop()
    assert {page.status_code for page in pages} == {404}
    assert dashboard.status_code == 200
    assert checked_out() == before


def test_the_500_page_shows_the_time_and_the_correlation_id(settings):
    settings.ROOT_URLCONF = "tests.core.crashing_urls"
    browser = Client(raise_request_exception=False)
    before = datetime.now(UTC).replace(microsecond=0)

    response = browser.get("/crash/", HTTP_X_CORRELATION_ID="report-me-1234")

    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page
    assert "report-me-1234" in page
    assert response["X-Correlation-ID"] == "report-me-1234"
    shown = datetime.strptime(re.search(r'datetime="([^"]+)"', page).group(1), "%Y-%m-%dT%H:%M:%S%z")
    assert before <= shown <= datetime.now(UTC)
    assert shown.strftime("%Y-%m-%d %H:%M:%S UTC") in page
    assert "hunter2" not in page  # the exception's text stays in the log


def test_the_500_page_carries_a_generated_correlation_id(settings):
    settings.ROOT_URLCONF = "tests.core.crashing_urls"
    response = Client(raise_request_exception=False).get("/crash/")
    assert response.status_code == 500
    assert response["X-Correlation-ID"] in response.content.decode()


def test_the_500_page_still_answers_when_its_template_fails(settings, tmp_path):
    (tmp_path / "500.html").write_text("{% load no_such_library %}")
    settings.ROOT_URLCONF = "tests.core.crashing_urls"
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [tmp_path]}]

    response = Client(raise_request_exception=False).get("/crash/", HTTP_X_CORRELATION_ID="report-me-5678")

    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page
    assert "report-me-5678" in page
    assert re.search(r"Time: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page)
