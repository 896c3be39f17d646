"""Error pages under the ASGI server give their database connection back: a signed-in
browser asking for pages that do not exist once took one pooled connection per
executor thread for good (Django renders error pages off the request's thread)."""

from __future__ import annotations

import httpx
import pytest
from django.db import connection

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
