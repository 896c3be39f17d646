"""What every portal view shares: the signed-in caller as a ``Principal`` and
the translation of the services' errors into pages (404 outside the caller's
scope, 403 for too little role)."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest

from apps.core.errors import Forbidden, NotFound
from apps.portal.htmx import hx_redirect
from apps.tenancy import principal as principals
from apps.tenancy.principal import Principal


def principal_of(request: HttpRequest) -> Principal:
    """The caller's grants, read once per request."""
    cached = getattr(request, "_portal_principal", None)
    if cached is None:
        cached = request._portal_principal = principals.for_user(request.user)
    return cached


def may(principal: Principal, perm: str) -> bool:
    """Whether some grant of ``principal`` carries ``perm`` anywhere (navigation, not access)."""
    return any(perm in grant.permissions for grant in principal.grants)


def filtered(filterset_class, request: HttpRequest, queryset):
    """``queryset`` narrowed by the list filters of the query string (the API's FilterSet),
    and their values. An invalid value, from a hand-edited link, narrows nothing: the page
    shows the whole list with no filter chosen."""
    filterset = filterset_class(request.GET, queryset=queryset)
    if not filterset.is_valid():
        filterset = filterset_class({}, queryset=queryset)
        filterset.is_valid()
    return filterset.qs, filterset.form.cleaned_data


def portal_view(view):
    """Signed-in users only; the view receives ``(request, principal, ...)``."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            # An htmx request comes back to the page it was made from, not to the fragment's URL.
            htmx = getattr(request, "htmx", None)
            next_path = (htmx.current_url_abs_path or "/") if htmx else request.get_full_path()
            return hx_redirect(request, redirect_to_login(next_path).url)
        try:
            return view(request, principal_of(request), *args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except Forbidden as exc:
            raise PermissionDenied(exc.message) from exc

    return wrapper
