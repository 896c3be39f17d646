"""The project page and its sections: members and service accounts.

Each action is a plain POST that redirects (no JavaScript needed) and, under
htmx, answers with the re-rendered section instead. The lists are paged; a page
link under htmx asks for its table alone (picked by ``HX-Target``).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_safe

from apps.core import crypto
from apps.core.errors import ApiError, Forbidden, NotFound
from apps.portal import queries
from apps.portal.context_processors import remember_project
from apps.portal.forms import MemberForm, ServiceAccountForm
from apps.portal.htmx import (
    htmx_partial,
    hx_redirect,
    quiet_fragment,
    refreshing,
    render_fragment,
    render_page_or_fragment,
)
from apps.portal.views.base import in_project, portal_view, refusal_on, scoped_project
from apps.tenancy import services
from apps.tenancy.models import Membership, Project, ServiceAccount
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

MEMBERS, ACCOUNTS, ALLOCATIONS = "members", "service-accounts", "allocations"
SECRETS, CREDENTIALS = "secrets", "access-credentials"
# ``allocations``, ``secrets`` and ``access-credentials`` are views of their own
# (apps.portal.views.allocations, .custody) rendered in the same page.
TAB_PERMS = {
    MEMBERS: Perm.MEMBER_VIEW,
    ACCOUNTS: Perm.SERVICE_ACCOUNT_VIEW,
    ALLOCATIONS: Perm.ALLOCATION_VIEW,
    SECRETS: Perm.SECRET_MANAGE,
    CREDENTIALS: Perm.ACCESS_CREDENTIAL_MANAGE,
}
SESSION_ISSUED = "portal.issued_secret"
ROWS_PER_PAGE = 25
# The tables a page link swaps (its htmx target), each with its template.
MEMBER_TABLES = {
    "project-members": "portal/partials/member_table.html",
    "tenant-members": "portal/partials/tenant_member_table.html",
}
ACCOUNT_TABLE = ("account-table", "portal/partials/service_account_table.html")


def _tabs(principal: Principal, project: Project) -> list[str]:
    return [tab for tab, perm in TAB_PERMS.items() if principal.can(perm, project.tenant_id, project.pk)]


# --- page and tabs -------------------------------------------------------------


@require_safe
@portal_view
def project_detail(request, principal, pk):
    project = scoped_project(principal, pk)
    tabs = _tabs(principal, project)
    if MEMBERS in tabs:
        return _members_page(request, principal, project)
    if ACCOUNTS in tabs:
        return _accounts_page(request, principal, project)
    return render_tab(request, principal, project, None, {})  # e.g. billing admins: the header only


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def members(request, principal, pk):
    if request.method == "POST":
        return _add_member(request, principal, pk)
    return _members_page(request, principal, scoped_project(principal, pk, Perm.MEMBER_VIEW))


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def service_accounts(request, principal, pk):
    if request.method == "POST":
        return _create_account(request, principal, pk)
    return _accounts_page(request, principal, scoped_project(principal, pk, Perm.SERVICE_ACCOUNT_VIEW))


def _members_page(request, principal, project, form=None):
    context = _members_context(request, principal, project, form)
    for target, template in MEMBER_TABLES.items():
        if refreshing(request, target):
            return quiet_fragment(request, template, {"project": project, **context})
    return render_tab(request, principal, project, MEMBERS, context)


def _accounts_page(request, principal, project):
    target, template = ACCOUNT_TABLE
    if refreshing(request, target):
        context = {"project": project, **_accounts_context(request, principal, project)}
        return quiet_fragment(request, template, context)
    issued = _pop_issued(request, project)
    response = render_tab(
        request, principal, project, ACCOUNTS, _accounts_context(request, principal, project, issued=issued)
    )
    if issued:
        add_never_cache_headers(response)
    return response


def render_tab(request, principal, project, tab, section_context, status=200):
    remember_project(request, project)
    context = {"project": project, "tab": tab, "tabs": _tabs(principal, project), **section_context}
    return render_page_or_fragment(
        request, "portal/project_detail.html", "portal/partials/project_tabs.html", context, status=status
    )


def _page(request, rows: QuerySet, param: str = "page") -> Page:
    return Paginator(rows, ROWS_PER_PAGE).get_page(request.GET.get(param))


def _removable(principal, page: Page) -> set:
    """Rows whose role the caller could grant, hence remove (no query: the grants are in hand)."""
    return {holder.pk for holder in page.object_list if services.may_remove(principal, holder)}


def _members_context(request, principal, project, form=None) -> dict:
    members_page = _page(request, queries.project_members(project))
    return {
        "members_page": members_page,
        "removable": _removable(principal, members_page),
        # Its own parameter: the two tables of the tab page independently.
        "tenant_members_page": _page(request, queries.tenant_wide_members(project), "tenant_page"),
        "can_manage_members": principal.can(Perm.MEMBER_MANAGE, project.tenant_id, project.pk),
        "member_form": form or MemberForm(),
    }


def _accounts_context(request, principal, project, form=None, issued=None) -> dict:
    accounts_page = _page(request, queries.project_service_accounts(project))
    return {
        "accounts_page": accounts_page,
        "revocable": _removable(principal, accounts_page),
        "can_manage_accounts": principal.can(Perm.SERVICE_ACCOUNT_MANAGE, project.tenant_id, project.pk),
        "account_form": form or ServiceAccountForm(),
        "issued": issued,
    }


def _section(request, principal, project, tab, section_context, *, status=200):
    """After an action: htmx gets the re-rendered section, a plain form the full page."""
    if htmx_partial(request):
        context = {"project": project, **section_context}
        template = (
            "portal/partials/members.html" if tab == MEMBERS else "portal/partials/service_accounts.html"
        )
        return render_fragment(request, template, context, status=status)
    return render_tab(request, principal, project, tab, section_context, status=status)


# --- members -------------------------------------------------------------------


def _add_member(request, principal, pk):
    project = scoped_project(principal, pk, Perm.MEMBER_MANAGE)
    form = MemberForm(request.POST)
    if form.is_valid():
        with refusal_on(form) as refused:
            membership = services.add_member(principal, project, **form.cleaned_data)
        if not refused:
            messages.success(
                request, f"Added {membership.user.get_username()} as {membership.get_role_display()}."
            )
            if not htmx_partial(request):
                return hx_redirect(request, reverse("project_members", args=[project.pk]))
            form = None
    return _section(request, principal, project, MEMBERS, _members_context(request, principal, project, form))


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def member_remove(request, principal, pk, membership_pk):
    project = scoped_project(principal, pk, Perm.MEMBER_MANAGE)
    membership = in_project(Membership.objects.select_related("user"), project, membership_pk, "member")
    if request.method != "POST":
        return render(request, "portal/member_remove.html", {"project": project, "membership": membership})
    try:
        services.remove_member(principal, membership)
    except (Forbidden, NotFound):
        raise
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request, f"Removed {membership.user.get_username()} ({membership.get_role_display()})."
        )
        if membership.user_id == request.user.pk:
            # Their own role is gone: the project's pages may be closed to them now.
            return hx_redirect(request, reverse("dashboard"))
    if not htmx_partial(request):
        return hx_redirect(request, reverse("project_members", args=[project.pk]))
    return _section(request, principal, project, MEMBERS, _members_context(request, principal, project))


# --- service accounts ----------------------------------------------------------


def _create_account(request, principal, pk):
    project = scoped_project(principal, pk, Perm.SERVICE_ACCOUNT_MANAGE)
    form = ServiceAccountForm(request.POST)
    if form.is_valid():
        with refusal_on(form) as refused:
            issued = services.create_service_account(principal, project, **form.cleaned_data)
        if not refused:
            shown = {
                "name": issued.account.name,
                "client_id": issued.account.client_id,
                "client_secret": issued.client_secret,
            }
            if not htmx_partial(request):
                _stash_issued(request, project, issued)
                return hx_redirect(request, reverse("project_service_accounts", args=[project.pk]))
            response = _section(
                request,
                principal,
                project,
                ACCOUNTS,
                _accounts_context(request, principal, project, issued=shown),
            )
            add_never_cache_headers(response)
            return response
    return _section(
        request, principal, project, ACCOUNTS, _accounts_context(request, principal, project, form)
    )


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def service_account_revoke(request, principal, pk, account_pk):
    project = scoped_project(principal, pk, Perm.SERVICE_ACCOUNT_MANAGE)
    account = in_project(ServiceAccount.objects.all(), project, account_pk, "service account")
    if request.method != "POST":
        return render(request, "portal/service_account_revoke.html", {"project": project, "account": account})
    if account.is_active:
        services.revoke_service_account(principal, account)
        messages.success(request, f"Service account {account.name} revoked; its tokens no longer work.")
    else:
        messages.info(request, f"Service account {account.name} was already revoked.")
    if not htmx_partial(request):
        return hx_redirect(request, reverse("project_service_accounts", args=[project.pk]))
    return _section(request, principal, project, ACCOUNTS, _accounts_context(request, principal, project))


# The plain-form flow redirects after creating an account, so the secret crosses
# one request in the session: encrypted (the session row is at rest like any
# other) and removed by the first page that shows it, so a reload never does.


def _stash_issued(request, project, issued) -> None:
    request.session[SESSION_ISSUED] = {
        "project": str(project.pk),
        "name": issued.account.name,
        "client_id": issued.account.client_id,
        "sealed_secret": crypto.encrypt(issued.client_secret),
    }


def _pop_issued(request, project) -> dict | None:
    stashed = request.session.get(SESSION_ISSUED)
    if not stashed or stashed.get("project") != str(project.pk):
        return None
    del request.session[SESSION_ISSUED]
    return {
        "name": stashed["name"],
        "client_id": stashed["client_id"],
        "client_secret": crypto.decrypt(stashed["sealed_secret"]),
    }
