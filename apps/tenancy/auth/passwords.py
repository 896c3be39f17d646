"""Password sign-in (the portal's ``/accounts/login/`` and the admin's ``/admin/login/``):
failed attempts are logged and counted, and a client or username that failed too often
is refused for the rest of the window with a 429 (see ``services.check_sign_in_allowed``).
"""

from __future__ import annotations

from functools import wraps

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ValidationError
from django.dispatch import receiver

from apps.core.errors import RateLimited
from apps.tenancy import services


def _address(request) -> str:
    # REMOTE_ADDR only: uvicorn already resolves trusted proxies into it, while a
    # client-sent X-Forwarded-For would let each guess pick a fresh address.
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


class ThrottledSignIn:
    """Refuses the sign-in before the password is checked while the limit holds."""

    retry_after = 0

    def clean(self):
        try:
            services.check_sign_in_allowed(self.cleaned_data.get("username") or "", _address(self.request))
        except RateLimited as exc:
            self.retry_after = exc.retry_after
            raise ValidationError(exc.message, code="rate_limited") from None
        return super().clean()


class SignInForm(ThrottledSignIn, AuthenticationForm):
    pass


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    pass


def answers_429_while_limited(login_view):
    """Wraps a login view whose form is a ``ThrottledSignIn``: a refused form is a 429
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
    # Django has already masked the password in ``credentials``; only the username is used.
    # An OIDC callback that yields no user arrives here too, without a username.
    services.sign_in_failed(credentials.get("username") or "", _address(request))
