from tests.factories import UserFactory


def test_local_login_reaches_dashboard_without_js_errors(portal, page):
    UserFactory(username="alice")
    page.goto(f"{portal.url}/")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{portal.url}/")
    assert page.locator("h1").inner_text() == "Dashboard"
    assert "alice" in page.locator(".who").inner_text()
    assert page.js_errors == []


def test_wrong_password_shows_error(portal, page):
    UserFactory(username="bob")
    page.goto(f"{portal.url}/accounts/login/")
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", "nope")
    page.click("button[type=submit]")
    assert page.locator(".error").is_visible()
