"""The portal on a phone (390 px wide): no page scrolls sideways, and the top
navigation folds into a menu that opens, with the user menu's links in it."""

from __future__ import annotations

from tests.e2e.demo_world import main_pages, seed_demo
from tests.support.concurrency import in_own_thread

PHONE = {"width": 390, "height": 844}
OVERFLOW = "() => document.scrollingElement.scrollWidth - window.innerWidth"


def test_mobile_width_without_horizontal_scroll(portal, browser):
    world = in_own_thread(seed_demo)
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{portal.url}/accounts/login/")
        assert page.evaluate(OVERFLOW) <= 0, "the sign-in page scrolls sideways"
        page.fill("input[name=username]", "demo")
        page.fill("input[name=password]", "demo")
        page.click("button[type=submit]")
        page.wait_for_url(f"{portal.url}/")

        wide = {}
        for name, path in main_pages(world).items():
            response = page.goto(f"{portal.url}{path}")
            assert response.status == 200, (name, response.status)
            overflow = page.evaluate(OVERFLOW)
            if overflow > 0:
                wide[name] = overflow
        assert wide == {}, f"pages wider than the screen (px too wide): {wide}"

        # The navigation is folded behind the menu button, and opens from it.
        page.goto(f"{portal.url}/")
        toggle = page.get_by_role("button", name="Menu")
        assert toggle.is_visible()
        assert not page.get_by_role("navigation", name="Main").is_visible()
        toggle.click()
        assert toggle.get_attribute("aria-expanded") == "true"
        nav = page.get_by_role("navigation", name="Main")
        assert nav.is_visible()
        assert page.evaluate(OVERFLOW) <= 0
        page.locator("summary.who").click()
        docs = page.get_by_role("link", name="API documentation")
        assert docs.is_visible()
        assert page.evaluate(OVERFLOW) <= 0
        nav.get_by_role("link", name="Projects").click()
        page.wait_for_url(f"{portal.url}/projects/")
        assert errors == []
    finally:
        context.close()


def test_wide_screens_show_the_navigation_and_link_the_api_docs_from_the_user_menu(portal, page):
    in_own_thread(seed_demo)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{portal.url}/accounts/login/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/")

    assert page.get_by_role("navigation", name="Main").is_visible()
    assert not page.get_by_role("button", name="Menu").is_visible()
    page.locator("summary.who").click()
    page.get_by_role("link", name="API documentation").click()
    page.wait_for_url(f"{portal.url}/api/docs/")
    page.wait_for_selector("text=GPUaaS portal API")
