"""The page shown when Django's CSRF check rejects a request (``CSRF_FAILURE_VIEW``).

Django rotates the CSRF token at sign-in, so a tab opened before signing in
again sends a stale token. Say so in the portal layout instead of Django's bare
page, and mark the answer with ``X-CSRF-Failure: 1`` so portal.js can tell it
apart from a role refusal. The rejected token and Django's reason are never
echoed back.
"""

from __future__ import annotations

from django.shortcuts import render

from apps.core.errors import error_json, is_api_path

CSRF_FAILURE_HEADER = "X-CSRF-Failure"
STALE_MESSAGE = "This page is out of date (you signed in again elsewhere): reload it."


def csrf_failure(request, reason: str = "", template_name: str = "403_csrf.html"):
    if is_api_path(request.path):
        response = error_json(403, "csrf_failed", STALE_MESSAGE)
    else:
        response = render(request, template_name, status=403)
    response[CSRF_FAILURE_HEADER] = "1"
    return response
