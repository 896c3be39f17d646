"""One view, two answers: a full page for browsers, a fragment for htmx.

``htmx_partial`` follows NetBox (``netbox/utilities/htmx.py``): an htmx request
that is not a boosted navigation and not a history restore wants a fragment.
``hx_redirect`` ends an action: ``HX-Redirect`` for htmx (a plain 302 would be
followed by the XHR and its target swapped into the page), a 302 otherwise.
"""

from __future__ import annotations

from django.contrib.messages import get_messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.cache import add_never_cache_headers, patch_vary_headers


def htmx_partial(request: HttpRequest) -> bool:
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request


def hx_redirect(request: HttpRequest, url: str) -> HttpResponse:
    if getattr(request, "htmx", None):
        response = HttpResponse()
        response["HX-Redirect"] = url
        return response
    return HttpResponseRedirect(url)


def render_page_or_fragment(
    request: HttpRequest,
    page: str,
    fragment: str,
    context: dict,
    *,
    status: int = 200,
    never_cache: bool = False,
) -> HttpResponse:
    """``page`` for a normal request, ``fragment`` (plus pending messages, swapped
    out of band into ``#messages``) for an htmx one."""
    if htmx_partial(request):
        response = render_fragment(request, fragment, context, status=status)
    else:
        response = render(request, page, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    if never_cache:
        add_never_cache_headers(response)
    return response


def render_fragment(request: HttpRequest, template: str, context: dict, *, status: int = 200) -> HttpResponse:
    body = render_to_string(template, context, request=request)
    # Messages added while handling this request would otherwise wait for the
    # next full page; the fragment carries them to the page's message area.
    body += render_to_string(
        "portal/partials/messages.html", {"messages": get_messages(request), "oob": True}, request=request
    )
    return HttpResponse(body, status=status)


def refreshing(request: HttpRequest, target: str) -> bool:
    """An htmx request for one part of the page (filters, pagination, a live refresh)."""
    return htmx_partial(request) and request.htmx.target == target


def quiet_fragment(request: HttpRequest, template: str, context: dict) -> HttpResponse:
    """A fragment without the out-of-band message area, which would wipe the
    messages the page shows each time the live script refreshes a part of it."""
    response = HttpResponse(render_to_string(template, context, request=request))
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response
