"""A project's allocations: the list (a project tab), the detail page with the
pipeline timeline, the allocate form with its live quota check, and release /
abort. Thin views over ``apps.allocations.services``, which check the policy,
write the audit trail and start the pipeline.

Live updates come over the project's WebSocket (``static/js/live.js``);
these views render the fragments it refreshes, picked by the ``HX-Target`` the
page asks for.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from apps.allocations import services
from apps.allocations.filters import AllocationFilter
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.catalog.models import Flavor
from apps.core.errors import ApiError, Forbidden, NotFound, ValidationFailed, error_json
from apps.metering import selectors as pricing
from apps.monitoring import series
from apps.monitoring.alerts import services as alerts
from apps.portal.context_processors import remember_project
from apps.portal.forms import AllocationForm, ReleaseForm
from apps.portal.htmx import (
    hx_redirect,
    quiet_fragment,
    refreshing,
    render_page_or_fragment,
)
from apps.portal.templatetags.portal import meter_step
from apps.portal.views.base import StateBadges, filtered, portal_view, refusal_on, scoped_project
from apps.portal.views.project_detail import _tabs
from apps.runtime import selectors as runtime
from apps.runtime.models import AppInstance
from apps.tenancy import policy
from apps.tenancy.models import Project
from apps.tenancy.principal import Principal
from apps.tenancy.quotas import warning_level
from apps.tenancy.roles import Perm

ALLOCATIONS_PER_PAGE = 25
ALLOCATION_ALERTS = 10  # the newest; the alerts page has them all
State = Allocation.State
BADGES = StateBadges(
    {
        State.PENDING: "info",
        State.PROVISIONING: "info",
        State.ACTIVE: "ok",
        State.FAILED: "bad",
        State.RELEASING: "warn",
        State.RELEASED: "muted",
    },
    in_flight=Allocation.IN_FLIGHT_STATES,
    socket="allocations",
)
STEP_TONES = {
    AllocationStep.Status.PENDING: "muted",
    AllocationStep.Status.RUNNING: "info",
    AllocationStep.Status.SUCCEEDED: "ok",
    AllocationStep.Status.FAILED: "bad",
    AllocationStep.Status.COMPENSATED: "warn",
}
ABORTABLE = (State.PENDING, State.PROVISIONING)
# Apps that run, or are about to: releasing under them asks for the typed hostname.
RUNNING_APP_STATES = (
    AppInstance.State.REQUESTED,
    AppInstance.State.STARTING,
    AppInstance.State.RUNNING,
    AppInstance.State.STOPPING,
)
TABLE_TARGET = "allocation-table"
BODY_TARGET = "allocation-detail-body"


def _allocation(principal: Principal, project: Project, pk, action_perm: str | None = None) -> Allocation:
    return policy.get_object(
        Allocation.objects.filter(project=project).select_related("node", "flavor"),
        principal,
        Perm.ALLOCATION_VIEW,
        action_perm,
        pk=pk,
    )


def _can_manage(principal: Principal, project: Project) -> bool:
    return principal.can(Perm.ALLOCATION_MANAGE, project.tenant_id, project.pk)


def allocation_tabs(allocation: Allocation, *, can_manage: bool) -> list[tuple[str, str, str]]:
    """The allocation page's tabs: (name, label, address); Access and the terminal for
    those who manage it."""
    args = [allocation.project_id, allocation.pk]
    tabs = [("overview", "Overview", reverse("allocation_detail", args=args))]
    if can_manage:
        tabs += [
            ("access", "Access", reverse("allocation_access", args=args)),
            ("terminal", "Terminal", reverse("allocation_terminal", args=args)),
            ("sessions", "Terminal sessions", reverse("terminal_sessions", args=args)),
        ]
    return tabs


# --- list ----------------------------------------------------------------------


@require_safe
@portal_view
def allocation_list(request, principal, pk):
    project = scoped_project(principal, pk, Perm.ALLOCATION_VIEW)
    remember_project(request, project)
    scoped = Allocation.objects.filter(project=project)
    counts = dict(scoped.order_by().values_list("state").annotate(n=Count("pk")))
    allocations, filters = filtered(
        AllocationFilter, request, scoped.select_related("node", "flavor").order_by("-created_at", "pk")
    )
    page = Paginator(allocations, ALLOCATIONS_PER_PAGE).get_page(request.GET.get("page"))
    for allocation in page:
        BADGES.decorate(allocation)
    context = {
        "project": project,
        "tab": "allocations",
        "tabs": _tabs(principal, project),
        "page_obj": page,
        "state_filter": filters["state"],
        "state_chips": [("", "All", sum(counts.values()))]
        + [(s.value, s.label.capitalize(), counts.get(s.value, 0)) for s in State],
        "can_manage": _can_manage(principal, project),
        **BADGES.live(project),
    }
    if refreshing(request, TABLE_TARGET):
        return quiet_fragment(request, "portal/partials/allocation_table.html", context)
    return render_page_or_fragment(
        request, "portal/project_detail.html", "portal/partials/project_tabs.html", context
    )


# --- detail --------------------------------------------------------------------


@require_safe
@portal_view
def allocation_detail(request, principal, pk, allocation_pk):
    project = scoped_project(principal, pk, Perm.ALLOCATION_VIEW)
    remember_project(request, project)
    allocation = _allocation(principal, project, allocation_pk)
    can_manage = _can_manage(principal, project)
    context = {
        "project": project,
        "allocation": BADGES.decorate(allocation),
        "tabs": allocation_tabs(allocation, can_manage=can_manage),
        "tab": "overview",
        "phases": _timeline(allocation),
        "can_manage": can_manage,
        "abortable": allocation.state in ABORTABLE and not allocation.abort_requested,
        "chart_windows": list(series.CHART_WINDOWS),
        "alerts": list(alerts.visible_alerts(principal).filter(allocation=allocation)[:ALLOCATION_ALERTS]),
        **_cost(allocation),
        **BADGES.live(project),
    }
    if refreshing(request, BODY_TARGET):
        return quiet_fragment(request, "portal/partials/allocation_detail_body.html", context)
    return render(request, "portal/allocation_detail.html", context)


@require_safe
@portal_view
def allocation_metrics(request, principal, pk, allocation_pk):
    """The allocation's GPU series for its charts: the metrics API's answer, from the
    same service, over one of the chart windows."""
    project = scoped_project(principal, pk, Perm.ALLOCATION_VIEW)
    allocation = _allocation(principal, project, allocation_pk)
    seconds, step = series.CHART_WINDOWS.get(request.GET.get("window"), series.CHART_WINDOWS["1h"])
    try:
        body = series.gpu_series(
            principal,
            project.tenant.tenant_id,
            start=str(int(time.time()) - seconds),
            step=str(step),
            allocation=allocation,
        )
    except ApiError as exc:
        return error_json(exc.status_code, exc.code, exc.message, exc.details, exc.retry_after)
    return HttpResponse(
        series.as_json(body), content_type="application/json", headers={"Cache-Control": "no-store"}
    )


def _cost(allocation: Allocation) -> dict:
    """What the allocation has cost so far, and what one hour of its node costs now
    (metering's rate cards, as the billing export prices)."""
    return {
        "accrued": pricing.accrued([allocation])[allocation.pk],
        "node_hour_price": pricing.node_hour_prices([allocation.flavor])[allocation.flavor_id],
    }


def _timeline(allocation: Allocation) -> list[tuple[str, list[AllocationStep]]]:
    """The provisioning steps, then the release steps (one query) once a release (or
    the undoing after a failure) has begun: before that they only promise an end."""
    phases: dict[str, list[AllocationStep]] = {
        AllocationStep.Phase.PROVISION: [],
        AllocationStep.Phase.RELEASE: [],
    }
    steps = list(allocation.steps.order_by("phase", "position"))
    releasing = allocation.state in (State.RELEASING, State.RELEASED) or any(
        s.phase == AllocationStep.Phase.RELEASE and s.status != AllocationStep.Status.PENDING for s in steps
    )
    if not releasing:
        del phases[AllocationStep.Phase.RELEASE]
    for step in steps:
        if step.phase not in phases:
            continue
        step.tone = STEP_TONES.get(step.status, "muted")
        step.duration = _duration(step)
        phases.setdefault(step.phase, []).append(step)
    labels = {AllocationStep.Phase.PROVISION: "Provisioning", AllocationStep.Phase.RELEASE: "Release"}
    return [(labels.get(phase, phase), steps) for phase, steps in phases.items()]


def _duration(step: AllocationStep) -> str:
    if not (step.started_at and step.finished_at):
        return ""
    seconds = (step.finished_at - step.started_at).total_seconds()
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


# --- allocate ------------------------------------------------------------------


def _flavors() -> list[Flavor]:
    """Every flavor with ``free``, its schedulable nodes now, and ``price``, a node-hour
    at the rates in effect now (two queries)."""
    schedulable = Q(nodes__state=Node.State.AVAILABLE, nodes__approved=True)
    flavors = list(Flavor.objects.annotate(free=Count("nodes", filter=schedulable)).order_by("name"))
    prices = pricing.node_hour_prices(flavors)
    for flavor in flavors:
        flavor.price = prices[flavor.pk]
    return flavors


def _initial(flavors: list[Flavor]) -> dict:
    first_free = next((f for f in flavors if f.free), flavors[0] if flavors else None)
    return {
        "flavor": first_free.name if first_free else "",
        "os_image": settings.OS_IMAGES[0] if settings.OS_IMAGES else "",
        "count": 1,
    }


def _asked(values: dict) -> dict:
    """The form's values (or the initial ones) as ``preview`` and ``allocate`` take them."""
    return {"flavor_name": values["flavor"], "os_image": values["os_image"], "count": int(values["count"])}


def _preview(principal, project, form: AllocationForm, values: dict | None = None):
    """The dry run for the form's values (or ``values`` for an unbound form); None when
    the values are not valid (the reasons are on the form)."""
    if values is None:
        if not form.is_valid():
            return None
        values = form.cleaned_data
    with refusal_on(form) as refused:
        plan = services.preview(principal, project, **_asked(values))
    if refused:
        return None
    # What it would cost: the price is shown before anything is taken.
    plan.estimate = pricing.estimate(form.flavors[values["flavor"]], int(values["count"]))
    return plan


def _plan_context(plan) -> dict:
    if plan is None:
        return {"plan": None}
    rows = []
    for resource, item in plan.quota.items():
        limit, used, after = item["limit"], item["used"], item["after"]
        if limit is None:
            rows.append({"resource": resource, **item, "level": "none", "percent": None})
            continue
        percent = 100.0 * after / limit if limit else (100.0 if after else 0.0)
        level = "over" if after > limit else warning_level(percent)
        # Widths in 5 % steps: the CSP allows no inline style, so the bar is a class.
        used_width = meter_step(100.0 * used / limit if limit else (100.0 if used else 0.0))
        rows.append(
            {
                "resource": resource,
                **item,
                "level": level,
                "percent": round(percent),
                "over_by": max(0, after - limit),
                "used_width": used_width,
                "added_width": max(0, meter_step(percent) - used_width),
            }
        )
    return {"plan": plan, "quota_rows": rows}


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def allocation_create(request, principal, pk):
    project = scoped_project(principal, pk, Perm.ALLOCATION_MANAGE)
    remember_project(request, project)
    flavors = _flavors()
    status = 200
    if request.method == "POST":
        form = AllocationForm(request.POST, flavors=flavors)
        values = None
        if form.is_valid():
            values = form.cleaned_data
            with refusal_on(form) as refused:
                allocations = services.allocate(principal, project, **_asked(values))
            if not refused:
                return _allocated(request, project, allocations)
            status = refused.status(request)
            if isinstance(refused.error, ValidationFailed):
                values = None  # values the service refused have no plan
        # After a refusal, the check says why with today's numbers.
        plan = _preview(principal, project, form, values) if values else None
    else:
        initial = _initial(flavors)
        form = AllocationForm(initial=initial, flavors=flavors)
        plan = _preview(principal, project, form, initial) if flavors else None
    context = {"project": project, "form": form, "flavors": flavors, **_plan_context(plan)}
    return render_page_or_fragment(
        request, "portal/allocation_new.html", "portal/partials/allocation_form.html", context, status=status
    )


def _allocated(request, project, allocations: list[Allocation]):
    hostnames = ", ".join(a.node.hostname for a in allocations)
    if len(allocations) == 1:
        messages.success(request, f"Allocating {hostnames}: provisioning has started.")
        return hx_redirect(request, reverse("allocation_detail", args=[project.pk, allocations[0].pk]))
    messages.success(request, f"Allocating {len(allocations)} nodes ({hostnames}): provisioning has started.")
    return hx_redirect(request, reverse("allocation_list", args=[project.pk]))


@require_POST
@portal_view
def allocation_check(request, principal, pk):
    """The live check: what the form's values would do, taking nothing."""
    project = scoped_project(principal, pk, Perm.ALLOCATION_MANAGE)
    form = AllocationForm(request.POST, flavors=_flavors())
    plan = _preview(principal, project, form)
    context = {"project": project, "form": form, "oob": True, **_plan_context(plan)}
    # Quiet: the check runs as the user types, and must not wipe the page's messages.
    return quiet_fragment(request, "portal/partials/allocation_plan.html", context)


# --- release / abort -----------------------------------------------------------


def _deleted_by_release(principal: Principal, allocation: Allocation) -> dict:
    """What releasing deletes: the instances the caller may see, by name; how many
    others (private to their owners); and whether apps run there, which asks the
    user to type the hostname."""
    doomed = list(
        runtime.deleted_by_release(allocation)
        .select_related("app")
        .order_by("name", "pk")
        .only("pk", "name", "state", "project_id", "app__name")
    )
    seen = runtime.visible_instances(principal).filter(pk__in=[i.pk for i in doomed])
    visible = set(seen.values_list("pk", flat=True))
    return {
        "doomed": [i for i in doomed if i.pk in visible],
        "doomed_hidden": sum(1 for i in doomed if i.pk not in visible),
        "apps_running": any(i.state in RUNNING_APP_STATES for i in doomed),
    }


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def allocation_release(request, principal, pk, allocation_pk):
    project = scoped_project(principal, pk, Perm.ALLOCATION_MANAGE)
    allocation = _allocation(principal, project, allocation_pk, Perm.ALLOCATION_MANAGE)
    detail_url = reverse("allocation_detail", args=[project.pk, allocation.pk])
    aborting = allocation.state in ABORTABLE
    hostname = allocation.node.hostname
    if allocation.state not in (*ABORTABLE, State.ACTIVE):
        if request.method != "POST":
            messages.info(request, f"The allocation is {allocation.state}: there is nothing to release.")
            return hx_redirect(request, detail_url)
        doomed = {"doomed": [], "doomed_hidden": 0, "apps_running": False}
    else:
        doomed = _deleted_by_release(principal, allocation)
    confirm = hostname if doomed["apps_running"] and not aborting else ""
    form = ReleaseForm(request.POST if request.method == "POST" else None, confirm_hostname=confirm)
    if request.method != "POST" or not form.is_valid():
        context = {
            "project": project,
            "allocation": BADGES.decorate(allocation),
            "aborting": aborting,
            "form": form,
            **doomed,
        }
        status = 400 if request.method == "POST" else 200
        return render(request, "portal/allocation_release.html", context, status=status)
    try:
        result = services.release(principal, allocation, **form.release_options())
    except (Forbidden, NotFound):
        raise
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        if aborting:
            messages.success(request, f"Aborting {hostname}: what provisioning took is being given back.")
        elif allocation.state == State.ACTIVE and result.state == State.RELEASING:
            messages.success(request, f"Releasing {hostname}: the node goes back to the pool when done.")
        else:
            messages.info(request, f"{hostname} is already {result.state.lower()}.")
    return hx_redirect(request, detail_url)
