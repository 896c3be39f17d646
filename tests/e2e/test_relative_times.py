"""Relative times age while a page stays open: "just now" becomes "3 minutes ago"
without a reload (the browser's clock is Playwright's, moved forward by the test)."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.e2e.allocations import alices_allocation


def test_relative_times_age_on_an_open_page(portal, page):
    allocation, _ = alices_allocation(enrolled=True)

    page.clock.install(time=datetime.now(UTC))
    page.goto(f"{portal.url}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/")
    page.goto(f"{portal.url}/projects/{allocation.project_id}/allocations/{allocation.pk}/")
    created = page.locator(".page-header time[data-ago]")
    assert created.inner_text() == "just now"

    page.evaluate("() => { window.__noReload = true; }")
    page.clock.fast_forward("03:10")
    page.wait_for_function(
        "() => document.querySelector('.page-header time[data-ago]').textContent === '3\\u00a0minutes ago'"
    )
    assert page.evaluate("window.__noReload") is True
    assert page.js_errors == []
