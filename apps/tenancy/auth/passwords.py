"""Password sign-in (the portal's ``/accounts/login/`` and the admin's ``/admin/login/``),
limited by django-axes (decision 0039): failed attempts are logged and counted, and a
username or client address that failed too often is refused with a 429 until its
cool-off has passed.
"""

from __future__ import annotations

import logging
import math
from functools import wraps

from axes.handlers.database import AxesDatabaseHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username, get_cool_off, get_credentials, get_lockout_parameters
from django.conf import settings
from django.contrib import messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.dispatch import receiver
from django.utils import timezone

auth_logger = logging.getLogger("gpuaas.auth")


class SignInAttemptHandler(AxesDatabaseHandler):
    """Axes' database handler (on PostgreSQL and the embedded SQLite alike) with a limit of
    its own for client addresses.

    Axes holds every lockout parameter to one limit, ``AXES_FAILURE_LIMIT`` (here the
    username's). An address, which many people may share, gets the higher
    ``LOGIN_FAILURES_PER_ADDRESS``, so each parameter's failures are scaled to Axes' limit
    before it compares them: an address reaches it at its own limit.
    """

    def get_failures(self, request, credentials=None) -> int:
        scaled = []
        for limit, attempts in self._per_parameter(request, credentials):
            failures = attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0
            scaled.append(failures * settings.AXES_FAILURE_LIMIT // limit)
        return max(scaled)

    def lockout_ends(self, request, credentials=None):
        """When the failures still counted fall below every limit again."""
        ends = request.axes_attempt_time
        for limit, attempts in self._per_parameter(request, credentials):
            counted = 0
            for failures, at in attempts.order_by("-attempt_time").values_list(
                "failures_since_start", "attempt_time"
            ):
                counted += failures
                if counted >= limit:
                    ends = max(ends, at + get_cool_off(request))
                    break
        return ends

    def _per_parameter(self, request, credentials):
        """(limit, attempts within the cool-off) for each lockout parameter."""
        limits = {"username": settings.AXES_FAILURE_LIMIT, "ip_address": settings.LOGIN_FAILURES_PER_ADDRESS}
        parameters = get_lockout_parameters(request, credentials)
        attempts = self.get_user_attempts(request, credentials)
        return [(limits[parameter], found) for parameter, found in zip(parameters, attempts, strict=True)]


def refused(request) -> bool:
    """Whether Axes refused this sign-in as locked out. Its backend marks a refusal before
    checking any password, and a refusal is not counted; the failure that reaches a limit
    is marked too, but has its count (and answers as the wrong password it was)."""
    return getattr(request, "axes_locked_out", False) and request.axes_failures_since_start is None


def not_a_password_attempt(request, credentials=None) -> bool:
    """Axes' whitelist: an attempt without a username (an OIDC callback that yields no
    user) guesses no password, so it is neither limited nor counted."""
    return not get_client_username(request, credentials)


class LockoutOnTheForm:
    """Shows Axes' refusal as the login form's error, with the time left, instead of the
    wrong-password message; ``answers_429_while_limited`` makes the page a 429."""

    retry_after = 0

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            if not refused(self.request):
                raise
        credentials = get_credentials(self.cleaned_data.get("username"))
        ends = AxesProxyHandler.get_implementation().lockout_ends(self.request, credentials)
        left = max(0.0, (ends - timezone.now()).total_seconds())
        self.retry_after = int(left) + 1  # the first whole second after the end: Axes counts up to it
        raise ValidationError(
            f"Too many failed sign-in attempts. Try again in {max(1, math.ceil(left / 60))} minute(s).",
            code="locked_out",
        )


class SignInForm(LockoutOnTheForm, AuthenticationForm):
    pass


class AdminSignInForm(LockoutOnTheForm, AdminAuthenticationForm):
    pass


class SignOutView(auth_views.LogoutView):
    """Sign-out that says so on the sign-in page it lands on (a message of the new,
    anonymous session)."""

    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        messages.success(request, "You are signed out.")
        return response


def answers_429_while_limited(login_view):
    """Wraps a login view whose form is a ``LockoutOnTheForm``: a refused form is a 429
    with ``Retry-After``, so clients and monitoring see throttling, not a bad password."""

    @wraps(login_view)
    def view(request, *args, **kwargs):
        response = login_view(request, *args, **kwargs)
        form = (getattr(response, "context_data", None) or {}).get("form")
        if getattr(form, "retry_after", 0):
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response

    return view


@receiver(user_login_failed, dispatch_uid="tenancy.sign_in_failed")
def _sign_in_failed(sender, credentials, request=None, **kwargs):
    """Each failure and each refusal is a log line with username and address, never the
    password (Django has masked it in ``credentials``), and not an audit row (decision 0004)."""
    username = credentials.get("username") or ""
    # REMOTE_ADDR, as Axes counts it (AXES_IPWARE_META_PRECEDENCE_ORDER).
    address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
    message = "password sign-in refused after too many failures" if refused(request) else "sign-in failed"
    auth_logger.warning(
        "%s: %r from %s", message, username, address, extra={"username": username, "source_ip": address}
    )
