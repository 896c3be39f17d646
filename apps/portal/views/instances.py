"""A project's app instances: the list, the detail page (state, endpoints, UI
mode, members, sharing, the app's logs, the events timeline), stop / start / delete behind a
confirmation page, and sharing. Thin views over ``apps.runtime.services``, which
decides who sees (``visible_instances``, ``get_instance``) and who manages.

Live updates come over the project's instance socket (``static/js/live.js``,
messages ``{"instance_id", "state"}``); these views render the fragments it
refreshes, picked by the ``HX-Target`` the page asks for.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.db.models import Count
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from guardian.shortcuts import get_users_with_perms

from apps.catalog import selectors as catalog
from apps.core.errors import ApiError, Forbidden, NotFound
from apps.core.middleware import default_csp
from apps.metering import selectors as pricing
from apps.portal.context_processors import remember_project
from apps.portal.forms import RevokeShareForm, ShareForm
from apps.portal.htmx import htmx_partial, hx_redirect, quiet_fragment, refreshing, render_fragment
from apps.portal.views.base import StateBadges, filtered, portal_view, refusal_on, scoped_project
from apps.proxy import routes as proxy_routes
from apps.proxy.adapters import Adapter
from apps.runtime import routes, services
from apps.runtime.agents import LOG_LINES_KEPT
from apps.runtime.filters import AppInstanceFilter
from apps.runtime.models import AppInstance
from apps.tenancy import policy
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

INSTANCES_PER_PAGE = 25
EVENTS_PER_PAGE = 50
# The Logs tab opens on the newest lines; the download has every kept line (10,000).
LOG_LINES_SHOWN = 1000
State = AppInstance.State
BADGES = StateBadges(
    {
        State.REQUESTED: "info",
        State.STARTING: "info",
        State.RUNNING: "ok",
        State.STOPPING: "warn",
        State.STOPPED: "muted",
        State.DECOMMISSIONING: "warn",
        State.DELETED: "muted",
        State.FAILED: "bad",
    },
    in_flight=(State.REQUESTED, State.STARTING, State.STOPPING, State.DECOMMISSIONING),
    socket="instances",
)
TABLE_TARGET = "instance-table"
BODY_TARGET = "instance-detail-body"
SHARING_TARGET = "instance-sharing"
# The page's actions: the service's action, its button, and what the confirmation says.
ACTIONS = {
    "stop": {
        "service": "stop",
        "label": "Stop",
        "confirm": "Stop instance",
        "tone": "btn-danger",
        "explain": "The workload stops on its node; its endpoints stop answering. "
        "The instance, its parameters and its storage stay, so it can be started again.",
    },
    "start": {
        "service": "start",
        "label": "Start",
        "confirm": "Start instance",
        "tone": "btn-primary",
        "explain": "The node's agent starts the workload again with the same parameters.",
    },
    "delete": {
        "service": "decommission",
        "label": "Delete",
        "confirm": "Delete instance",
        "tone": "btn-danger",
        "explain": "The workload is removed from its node together with its scratch storage "
        "and its secrets, and its GPUs are given back. This cannot be undone.",
    },
}


def _instance(principal: Principal, pk, instance_pk) -> AppInstance:
    """An instance the caller may see (404 otherwise), with what every page shows of it.
    Someone it was shared with by name may have no role in its project."""
    found = services.get_instance(principal, pk, instance_pk)
    return AppInstance.objects.select_related(
        "app", "app_version", "allocation__node", "allocation__flavor", "project__tenant"
    ).get(pk=found.pk)


# The buttons follow the service's own rules (who manages, which state allows what),
# read from it rather than copied, so that a page never offers what ``change`` refuses.


def _valid_actions(instance: AppInstance) -> list[str]:
    """The page's actions the service accepts from the instance's state."""
    return [
        name for name, action in ACTIONS.items() if instance.state in services.ACTIONS[action["service"]][0]
    ]


# --- list ----------------------------------------------------------------------


@require_safe
@portal_view
def instance_list(request, principal, pk):
    project = scoped_project(principal, pk, Perm.INSTANCE_VIEW)
    remember_project(request, project)
    scoped = services.visible_instances(principal).filter(project=project)
    counts = dict(scoped.order_by().values_list("state").annotate(n=Count("pk")))
    instances, filters = filtered(
        AppInstanceFilter,
        request,
        scoped.select_related("app", "app_version", "allocation__node")
        .defer("app_version__manifest", "parameters")
        .order_by("-created_at", "pk"),
    )
    page = Paginator(instances, INSTANCES_PER_PAGE).get_page(request.GET.get("page"))
    endpoints = proxy_routes.first_endpoints(page.object_list)
    for instance in page:
        running = instance.state == State.RUNNING
        BADGES.decorate(instance).open_endpoint = endpoints.get(instance.pk) if running else None
    context = {
        "project": project,
        "page_obj": page,
        "state_filter": filters["state"],
        "state_chips": [("", "All", sum(n for s, n in counts.items() if s != State.DELETED))]
        + [(s.value, s.label.capitalize(), counts.get(s.value, 0)) for s in State],
        "can_launch": principal.can(Perm.INSTANCE_MANAGE, project.tenant_id, project.pk),
        **BADGES.live(project),
    }
    if refreshing(request, TABLE_TARGET):
        return quiet_fragment(request, "portal/partials/instance_table.html", context)
    return render(request, "portal/instances.html", context)


# --- detail --------------------------------------------------------------------


def _parameters(instance: AppInstance) -> list[tuple[str, str, object]]:
    """``(name, label, value)`` in the manifest's order, then anything it no longer declares."""
    declared = instance.manifest.get("parameters", [])
    rows = [
        (p["name"], p.get("label") or p["name"], instance.parameters[p["name"]])
        for p in declared
        if p["name"] in instance.parameters
    ]
    known = {p["name"] for p in declared}
    rows += [(name, name, value) for name, value in instance.parameters.items() if name not in known]
    return rows


def _shared_users(instance: AppInstance) -> list:
    users = get_users_with_perms(instance, with_group_users=False, only_with_perms_in=[services.VIEW_PERM])
    return sorted(users, key=lambda user: user.get_username())


def _shell_tabs(instance: AppInstance, app_route) -> list[tuple[str, str]]:
    """The workload shell's tabs: App UI only when the platform exposes one."""
    tabs = [("overview", "Overview")]
    if instance.ui_mode != AppInstance.UiMode.NATIVE and app_route is not None:
        tabs.append(("app", "App UI"))
    return [*tabs, ("logs", "Logs"), ("events", "Events"), ("access", "Access")]


def _events_page(instance: AppInstance, number) -> Page:
    page = Paginator(services.instance_events(instance), EVENTS_PER_PAGE).get_page(number)
    for event in page:
        event.tone = BADGES.tone(event.to_state)
    return page


def _detail_context(principal: Principal, instance: AppInstance, tab: str = "overview", page=None) -> dict:
    """``page``: the page of the timeline the Events tab shows (the newest by default)."""
    project = instance.project
    app_route = proxy_routes.first_route(instance)
    tabs = _shell_tabs(instance, app_route)
    if tab not in dict(tabs):
        tab = "overview"
    manage = services.may_manage(principal, instance)
    can_view_allocation = principal.can(Perm.ALLOCATION_VIEW, project.tenant_id, project.pk)
    return {
        "project": project,
        "instance": BADGES.decorate(instance),
        "node": instance.allocation.node,
        "parameters": _parameters(instance),
        "endpoints": [
            routes.describe(instance, endpoint) for endpoint in instance.endpoints.order_by("name")
        ],
        "members": list(instance.members.select_related("node").order_by("role", "node__hostname")),
        # Only the Events tab shows the timeline, only the Logs tab the output.
        "events_page": _events_page(instance, page) if tab == "events" else None,
        **(_logs_context(instance) if tab == "logs" else {}),
        "can_manage": manage,
        "actions": _valid_actions(instance) if manage else [],
        "can_view_project": principal.can(Perm.PROJECT_VIEW, project.tenant_id, project.pk),
        "can_view_allocation": can_view_allocation,
        # What its node has cost, for those who may see the node's allocation.
        "accrued": (
            pricing.accrued([instance.allocation])[instance.allocation_id] if can_view_allocation else None
        ),
        # The project's socket admits only those who may view its instances; someone
        # the instance was shared with by name reloads instead.
        "live": principal.can(Perm.INSTANCE_VIEW, project.tenant_id, project.pk),
        "tab": tab,
        "tabs": tabs,
        "app_route": app_route,
        # The same-origin warning is for apps the platform does not ship and trust.
        "trusted_app": catalog.platform_ships(instance.app_version),
        "launcher_url": (
            reverse("instance_open", args=[project.pk, instance.pk, app_route.endpoint_name])
            if app_route
            else ""
        ),
        "idle_timeout": app_route.policy.get("idle_timeout_seconds") if app_route else None,
        **BADGES.live(project),
    }


def _logs_context(instance: AppInstance) -> dict:
    """The newest lines, and where the tab follows the log: the instance's log socket
    says when there are more, read through the API (which applies visibility)."""
    project_id = instance.project_id
    lines = list(services.instance_logs(instance, tail=LOG_LINES_SHOWN))
    return {
        "log_lines": lines,
        "log_after": lines[-1].id if lines else 0,
        "log_lines_shown": LOG_LINES_SHOWN,
        "log_lines_kept": LOG_LINES_KEPT,
        "logs_ws_url": f"/ws/projects/{project_id}/instances/{instance.pk}/logs/",
        "logs_api_url": reverse("instance-logs", args=[project_id, instance.pk]),
    }


def _sharing_context(principal: Principal, instance: AppInstance, form: ShareForm | None = None) -> dict:
    return {
        "project": instance.project,
        "instance": instance,
        "shared_users": _shared_users(instance),
        "share_form": form or ShareForm(initial={"with_project": instance.shared_with_project}),
        "can_manage": services.may_manage(principal, instance),
    }


@require_safe
@portal_view
def instance_detail(request, principal, pk, instance_pk):
    instance = _instance(principal, pk, instance_pk)
    context = _detail_context(
        principal, instance, request.GET.get("tab", "overview"), request.GET.get("page")
    )
    if refreshing(request, BODY_TARGET):
        return quiet_fragment(request, "portal/partials/instance_detail_body.html", context)
    if context["can_view_project"]:
        remember_project(request, instance.project)
    context.update(_sharing_context(principal, instance))
    response = render(request, "portal/instance_detail.html", context)
    if context["app_route"] is not None:
        # The embedded App UI frames the app's own origin (subdomain routes).
        response.csp = default_csp(request).replace(
            "frame-src 'self'", f"frame-src 'self' {context['app_route'].origin}"
        )
    return response


@require_safe
@xframe_options_sameorigin
@portal_view
def instance_open(request, principal, pk, instance_pk, endpoint):
    """The launcher (seed 003 "Launcher Recovery"): a same-origin page that mints a UI
    session through the API, preflights the app and only then sends the browser there."""
    instance = _instance(principal, pk, instance_pk)
    route = proxy_routes.route_for(instance, endpoint)
    if route is None:
        raise Http404("This app has no such endpoint behind the platform proxy.")
    context = {
        "instance": instance,
        "route": route,
        "verify": Adapter.from_policy(route.policy).verify,
        "embedded": request.GET.get("embed") == "1",
        "detail_url": reverse("instance_detail", args=[instance.project_id, instance.pk]),
    }
    response = render(request, "portal/instance_open.html", context)
    response.csp = (
        default_csp(request)
        .replace("frame-ancestors 'none'", "frame-ancestors 'self'")
        .replace("form-action 'self'", f"form-action 'self' {route.origin}")
    )
    # The ticket's POST to the route's origin must carry our Origin (the proxy checks
    # it); the portal's usual "same-origin" policy would make it "null".
    response["Referrer-Policy"] = "strict-origin"
    return response


@require_safe
@portal_view
def instance_logs_download(request, principal, pk, instance_pk):
    """Every kept line of the instance's output, as a text file."""
    instance = _instance(principal, pk, instance_pk)
    lines = services.instance_logs(instance).values_list("text", "dropped")
    body = "".join(
        f"[{dropped} lines dropped]\n" if dropped else f"{text}\n" for text, dropped in lines.iterator()
    )
    response = HttpResponse(body, content_type="text/plain; charset=utf-8")
    name = slugify(instance.name) or "instance"
    response["Content-Disposition"] = f'attachment; filename="{name}-logs.txt"'
    response["Cache-Control"] = "no-store"
    return response


# --- stop / start / delete -------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def instance_action(request, principal, pk, instance_pk, action):
    if action not in ACTIONS:
        raise Http404("No such action.")
    instance = _instance(principal, pk, instance_pk)
    if not services.may_manage(principal, instance):
        policy.require(principal, Perm.INSTANCE_MANAGE, instance)  # records the denial, raises 403
    detail_url = reverse("instance_detail", args=[instance.project_id, instance.pk])
    spec = ACTIONS[action]
    if request.method != "POST":
        if action not in _valid_actions(instance):
            messages.info(request, f"{instance.name} is {instance.state}: it cannot be {_past(action)} now.")
            return hx_redirect(request, detail_url)
        context = {
            "project": instance.project,
            "instance": BADGES.decorate(instance),
            "action": action,
            "spec": spec,
        }
        return render(request, "portal/instance_action.html", context)
    previous = instance.state
    try:
        services.change(principal, instance, spec["service"])
    except (Forbidden, NotFound):
        raise
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        instance.refresh_from_db(fields=["state"])
        if instance.state == previous:
            messages.info(request, f"{instance.name} is already {instance.state}.")
        else:
            messages.success(request, f"{spec['label']}: {instance.name} is {instance.state}.")
    return hx_redirect(request, detail_url)


def _past(action: str) -> str:
    return {"stop": "stopped", "start": "started", "delete": "deleted"}[action]


# --- sharing ---------------------------------------------------------------------


@require_POST
@portal_view
def instance_share(request, principal, pk, instance_pk):
    """Share with the project or named users (one form), or stop sharing with one user."""
    instance = _instance(principal, pk, instance_pk)
    if not services.may_manage(principal, instance):
        policy.require(principal, Perm.INSTANCE_MANAGE, instance)
    revoke = request.POST.get("revoke", "").strip()
    if revoke and not RevokeShareForm({"revoke": revoke}).is_valid():
        return HttpResponseBadRequest("Not a username.")
    form = ShareForm(request.POST) if not revoke else None
    if revoke:
        services.share(principal, instance, revoke_usernames=[revoke])  # names are not checked: no refusal
        messages.success(request, f"{revoke} no longer sees {instance.name}.")
    elif form.is_valid():
        names, with_project = form.cleaned_data["usernames"], form.cleaned_data["with_project"]
        with refusal_on(form) as refused:
            services.share(principal, instance, with_project=with_project, usernames=names)
        if not refused:
            said = "shared with the project" if with_project else "not shared with the project"
            messages.success(
                request,
                f"{instance.name} is {said}" + (f"; shared with {', '.join(names)}." if names else "."),
            )
    instance.refresh_from_db()
    refused = form is not None and bool(form.errors)
    context = _sharing_context(principal, instance, form if refused else None)
    if htmx_partial(request):
        return render_fragment(request, "portal/partials/instance_sharing.html", context)
    if refused:
        context.update(_detail_context(principal, instance))
        return render(request, "portal/instance_detail.html", context, status=400)
    return hx_redirect(request, reverse("instance_detail", args=[instance.project_id, instance.pk]))
