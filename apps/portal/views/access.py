"""SSH access in the portal: an allocation's Access tab (how to log in, the host keys
to check, the keys on its runtime user with add and remove) and the SSH keys of the
user's profile. Thin views over ``apps.access.services``."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.access import services
from apps.access.models import AuthorizedKey
from apps.core.errors import ApiError, Forbidden, NotFound
from apps.portal.context_processors import remember_project
from apps.portal.forms import ProfileKeyForm, SshKeyForm
from apps.portal.htmx import htmx_partial, hx_redirect, quiet_fragment, refreshing, render_fragment
from apps.portal.views.allocations import BADGES, allocation_tabs
from apps.portal.views.base import portal_view, refusal_on
from apps.tenancy.principal import Principal

ACCESS_TARGET = "allocation-access"
ACCESS_TEMPLATE = "portal/partials/allocation_access.html"
PROFILE_TARGET = "profile-keys"
PROFILE_TEMPLATE = "portal/partials/profile_keys.html"


# --- an allocation's Access tab ---------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def allocation_access(request, principal, pk, allocation_pk):
    allocation = services.get_allocation(principal, pk, allocation_pk)
    form = None
    if request.method == "POST":
        form = SshKeyForm(request.POST)
        if form.is_valid():
            with refusal_on(form) as refused:
                key = services.add_key(principal, allocation, **form.cleaned_data)
            if not refused:
                messages.success(request, f"Key {key.fingerprint} added: the node applies it within seconds.")
                if not htmx_partial(request):
                    return hx_redirect(request, _access_url(allocation))
                form = None
    context = _access_context(principal, allocation, form)
    if refreshing(request, ACCESS_TARGET):
        return quiet_fragment(request, ACCESS_TEMPLATE, context)
    if htmx_partial(request):
        return render_fragment(request, ACCESS_TEMPLATE, context)
    remember_project(request, allocation.project)
    return render(request, "portal/allocation_access.html", context)


@require_POST
@portal_view
def allocation_key_remove(request, principal, pk, allocation_pk, key_pk):
    allocation = services.get_allocation(principal, pk, allocation_pk)
    try:
        key = services.remove_key(principal, allocation, key_pk)
    except (Forbidden, NotFound):
        raise
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Key {key.fingerprint} removed: the node drops it within seconds.")
    if htmx_partial(request):
        return render_fragment(request, ACCESS_TEMPLATE, _access_context(principal, allocation))
    return hx_redirect(request, _access_url(allocation))


def _access_url(allocation) -> str:
    return reverse("allocation_access", args=[allocation.project_id, allocation.pk])


def _access_context(principal: Principal, allocation, form=None) -> dict:
    keys = list(services.keys_of(allocation))
    for key in keys:
        key.removable = key.state != AuthorizedKey.State.REMOVING and services.may_change(principal, key)
    return {
        "project": allocation.project,
        "allocation": BADGES.decorate(allocation),
        "tabs": allocation_tabs(allocation, can_manage=True),
        "tab": "access",
        "access": services.access_info(allocation),
        "keys": keys,
        # The node moves keys from pending/removing within seconds: the tab polls till then.
        "settling": any(key.state != AuthorizedKey.State.APPLIED for key in keys),
        "can_add": allocation.state in services.KEYED_STATES,
        "key_form": form or SshKeyForm(),
    }


# --- the profile's SSH keys ---------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def profile(request, principal):
    form = None
    if request.method == "POST":
        form = ProfileKeyForm(request.POST)
        if form.is_valid():
            with refusal_on(form) as refused:
                key = services.add_profile_key(principal, **form.cleaned_data)
            if not refused:
                messages.success(request, f"Key {key.fingerprint} added to your profile.")
                if not htmx_partial(request):
                    return hx_redirect(request, reverse("profile"))
                form = None
    context = _profile_context(principal, form)
    if htmx_partial(request):
        return render_fragment(request, PROFILE_TEMPLATE, context)
    return render(request, "portal/profile.html", context)


@require_POST
@portal_view
def profile_key_remove(request, principal, key_pk):
    services.remove_profile_key(principal, key_pk)
    messages.success(
        request, "Key removed from your profile (allocations that have it keep it until removed there)."
    )
    if htmx_partial(request):
        return render_fragment(request, PROFILE_TEMPLATE, _profile_context(principal))
    return hx_redirect(request, reverse("profile"))


def _profile_context(principal: Principal, form=None) -> dict:
    return {"profile_keys": list(services.profile_keys(principal.user)), "key_form": form or ProfileKeyForm()}
