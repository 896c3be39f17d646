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


def test_too_many_wrong_passwords_lock_the_sign_in_out_with_a_message(portal, page, settings):
    settings.AXES_FAILURE_LIMIT = 2
    UserFactory(username="carol")
    page.goto(f"{portal.url}/accounts/login/")

    def submit(password: str):
        page.fill("input[name=username]", "carol")
        page.fill("input[name=password]", password)
        with page.expect_navigation() as navigation:
            page.click("button[type=submit]")
        return navigation.value

    for _ in range(2):
        assert submit("nope").status == 200
        assert "Please enter a correct username and password" in page.locator(".error").inner_text()
    refused = submit("pw")  # the right password, while locked out

    assert refused.status == 429
    message = page.locator(".error").inner_text()
    assert "Too many failed sign-in attempts. Try again in 15 minute(s)." in message
    assert "/accounts/login/" in page.url
    # Chromium reports the page's own 429 on the console; nothing else may be there.
    assert [e for e in page.js_errors if "status of 429" not in e] == []
