"""Signed-in browsers of the portal's pages, and of its WebSockets."""

from __future__ import annotations

from django.test import Client
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

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


async def handshake(url: str, headers: dict) -> int | str:
    """ "open" when the socket at ``url`` takes a handshake sent with ``headers``, else
    the HTTP status it refused it with."""
    try:
        async with connect(url, additional_headers=headers, open_timeout=10):
            return "open"
    except InvalidStatus as exc:
        return exc.response.status_code
