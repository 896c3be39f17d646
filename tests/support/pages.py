"""Signed-in browsers of the portal's pages."""

from __future__ import annotations

from django.test import Client

# The header htmx sends: the page answers with a fragment instead of the whole page.
HTMX = {"HTTP_HX_REQUEST": "true"}


def client_for(user) -> Client:
    """A test client signed in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


def session_cookie(user) -> str:
    """The Cookie header of a browser signed in to the portal as ``user``."""
    return f"sessionid={client_for(user).cookies['sessionid'].value}"
