"""The portal's error pages: Django's own, with the database connection they open
handed back.

Under ASGI, Django 5.2 renders an error page on the event loop's default executor, not
on the request's own thread (Django ticket #36027, fixed after 5.2). The page's context
processors read ``request.user``, which opens a pooled connection in that executor
thread; ``request_finished`` closes only the request thread's, so each executor thread
kept one for good, and an in-process server's stopped threads took theirs with them
(the pool ran dry). A connection inside a transaction (a test's) is left alone."""

from __future__ import annotations

import functools
import sys

from django.db import connection
from django.views import defaults

from apps.core import outages


def _handing_back_the_connection(view):
    @functools.wraps(view)
    def handler(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return handler


bad_request = _handing_back_the_connection(defaults.bad_request)
permission_denied = _handing_back_the_connection(defaults.permission_denied)
page_not_found = _handing_back_the_connection(defaults.page_not_found)


def _server_error(request):
    """A dependency down in a middleware (a session saved, a rate counted) answers 503
    like one down in a view (``ApiErrorMiddleware``); anything else is the 500 page."""
    return outages.answer(request, sys.exc_info()[1]) or defaults.server_error(request)


server_error = _handing_back_the_connection(_server_error)
