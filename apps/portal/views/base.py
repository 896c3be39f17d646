"""What every portal view shares: the signed-in caller as a ``Principal``, the
project a page is about, and the translation of the services' errors into pages
(404 outside the caller's scope, 403 for too little role, any other refusal on
the form that asked), and how the pages of stateful objects show their state."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest

from apps.core.errors import ApiError, Forbidden, NotFound
from apps.portal.forms import ServiceForm
from apps.portal.htmx import htmx_partial, hx_redirect
from apps.tenancy import policy
from apps.tenancy import principal as principals
from apps.tenancy.models import Project
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm


class StateBadges:
    """How pages show the states of one kind of object: each state's badge tone (a state
    without one is muted), which states are in flight, and the live script's copy of the
    tones (``data-tones``) with the project's socket that sends those objects' news."""

    def __init__(self, tones: dict[str, str], *, in_flight: Iterable[str], socket: str):
        self.tones = tones
        self.in_flight = frozenset(in_flight)
        self.socket = socket
        self.tones_json = json.dumps({str(state): tone for state, tone in tones.items()})

    def tone(self, state: str) -> str:
        return self.tones.get(state, "muted")

    def decorate(self, obj):
        """``obj`` with what its pages show about its state (tone, in flight)."""
        obj.tone = self.tone(obj.state)
        obj.in_flight = obj.state in self.in_flight
        return obj

    def live(self, project: Project) -> dict:
        return {"ws_url": f"/ws/projects/{project.pk}/{self.socket}/", "tones_json": self.tones_json}


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


def scoped_project(principal: Principal, pk, action_perm: str | None = None) -> Project:
    """The project of a page: one the caller may view (404 otherwise) and, with
    ``action_perm``, act on (403 otherwise, recorded)."""
    return policy.get_object(
        Project.objects.select_related("tenant"), principal, Perm.PROJECT_VIEW, action_perm, pk=pk
    )


def in_project(queryset: QuerySet, project: Project, pk, noun: str):
    """The object of ``queryset`` the project holds at ``pk``; 404 when it holds none."""
    found = queryset.filter(project=project, pk=pk).first()
    if found is None:
        raise Http404(f"No such {noun} in this project.")
    return found


class Refusal:
    """What ``refusal_on`` caught: the service's error, or None when the call went through."""

    __slots__ = ("error",)

    def __init__(self):
        self.error: ApiError | None = None

    def __bool__(self) -> bool:
        return self.error is not None

    def status(self, request: HttpRequest) -> int:
        """A plain form post answers with the refusal's status; htmx swaps only 2xx answers."""
        return 200 if self.error is None or htmx_partial(request) else self.error.status_code


@contextmanager
def refusal_on(form: ServiceForm, *, page_answers: tuple = (Forbidden, NotFound)) -> Iterator[Refusal]:
    """Run a service call; a refusal lands on ``form``, except ``page_answers``: by
    default 404 and 403, which ``portal_view`` makes the page's own answer."""
    refusal = Refusal()
    try:
        yield refusal
    except page_answers:
        raise
    except ApiError as exc:
        form.add_service_error(exc)
        refusal.error = exc
