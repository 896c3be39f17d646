"""A failed sign-in says so to a screen reader too (role=alert) and marks the fields
it is about; signing out says that you are signed out."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


class Elements(HTMLParser):
    """Each start tag's attributes, with the text inside ``role=alert`` elements."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.alert_text = ""
        self._alert_depth = 0
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if self._alert_depth:
            self._alert_depth += 1
        elif attributes.get("role") == "alert":
            self._alert_depth = 1

    def handle_endtag(self, tag):
        if self._alert_depth:
            self._alert_depth -= 1

    def handle_data(self, data):
        if self._alert_depth:
            self.alert_text += data

    def inputs(self) -> dict[str, dict]:
        return {a["name"]: a for tag, a in self.tags if tag == "input" and "name" in a}


def test_a_wrong_password_is_announced_and_marks_both_fields():
    UserFactory(username="alice")
    failed = Client().post("/accounts/login/", {"username": "alice", "password": "wrong"})
    page = Elements(failed.content.decode())

    assert "Please enter a correct username and password" in page.alert_text
    fields = page.inputs()
    assert fields["username"]["aria-invalid"] == "true"
    assert fields["password"]["aria-invalid"] == "true"
    assert fields["username"]["value"] == "alice"  # kept, so only the password is typed again
    assert "value" not in fields["password"]


def test_the_first_visit_marks_nothing():
    page = Elements(Client().get("/accounts/login/").content.decode())
    assert page.alert_text == ""
    assert all("aria-invalid" not in attributes for attributes in page.inputs().values())


def test_signing_out_says_you_are_signed_out():
    browser = Client()
    browser.force_login(UserFactory())

    signed_out = browser.post("/accounts/logout/", follow=True)

    assert signed_out.redirect_chain[-1][0] == "/accounts/login/"
    assert "You are signed out." in signed_out.content.decode()
    assert browser.get("/").status_code == 302  # and really are
