"""The portal's error pages: Django's own, with the database connection they open
handed back, and a 500 page a user can report.

Under ASGI, Django 5.2 renders an error page on the event loop's default executor, not
on the request's own thread (Django ticket #36027, fixed after 5.2). The page's context
processors read ``request.user``, which opens a pooled connection in that executor
thread; ``request_finished`` closes only the request thread's, so each executor thread
kept one for good, and an in-process server's stopped threads took theirs with them
(the pool ran dry). A connection inside a transaction (a test's) is left alone."""

from __future__ import annotations

import functools
import logging
import sys
from datetime import UTC, datetime

from django.db import connection
from django.http import HttpResponseServerError
from django.template import loader
from django.utils.html import escape
from django.views import defaults

from apps.core import correlation, outages

logger = logging.getLogger(__name__)


def _handing_back_the_connection(view):
    @functools.wraps(view)
    def handler(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return handler


def _reportable_500(request, template_name: str = "500.html"):
    """The time and the correlation id, so a user can quote them to the operators.

    Rendered without the request: context processors would read the user and the
    session, which may be what failed. If even the template fails, a bare page still
    carries both."""
    now = datetime.now(UTC).replace(microsecond=0)
    correlation_id = getattr(request, "correlation_id", None) or correlation.peek() or "-"
    time_text = now.strftime("%Y-%m-%d %H:%M:%S UTC")
    context = {"time": now, "time_text": time_text, "correlation_id": correlation_id}
    try:
        body = loader.get_template(template_name).render(context)
    except Exception:
        logger.exception("the 500 page failed to render")
        body = (
            "<!doctype html><title>Error</title><h1>Something went wrong</h1>"
            f"<p>Time: {context['time_text']}. Reference: {escape(correlation_id)}.</p>"
        )
    return HttpResponseServerError(body)


bad_request = _handing_back_the_connection(defaults.bad_request)
permission_denied = _handing_back_the_connection(defaults.permission_denied)
page_not_found = _handing_back_the_connection(defaults.page_not_found)


def _server_error(request):
    """A dependency down in a middleware (a session saved, a rate counted) answers 503
    like one down in a view (``ApiErrorMiddleware``); anything else is the 500 page."""
    return outages.answer(request, sys.exc_info()[1]) or _reportable_500(request)


server_error = _handing_back_the_connection(_server_error)
