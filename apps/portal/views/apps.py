"""The app catalog: the apps the caller may see, an app's page (versions,
endpoints, UI capability, resources) and the launch form, built from the chosen
version's manifest. Thin views over ``apps.catalog.services`` and
``apps.runtime.services.launch``, which decide visibility, entitlement,
placement, capacity and the parameters' values.
"""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Prefetch
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_safe

from apps.access import selectors as access
from apps.allocations.models import Allocation
from apps.catalog import manifests
from apps.catalog import services as catalog
from apps.catalog.models import App, AppVersion
from apps.core.errors import NotFound
from apps.portal.context_processors import SESSION_PROJECT
from apps.portal.forms import LaunchForm
from apps.portal.htmx import hx_redirect, render_page_or_fragment
from apps.portal.queries import visible_projects
from apps.portal.views.base import portal_view, refusal_on, scoped_project
from apps.proxy import exposure
from apps.runtime import capacity
from apps.runtime import services as runtime
from apps.tenancy.models import Project
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm

PROXY_MODE_LABELS = {"path_prefix": "under a path of the portal", "subdomain": "on its own subdomain"}
UI_MODE_LABELS = {"embedded": "Embedded", "link_out": "Link-out", "native": "Native (no web UI)"}


def _published() -> Prefetch:
    return Prefetch(
        "versions",
        queryset=AppVersion.objects.filter(status=AppVersion.Status.PUBLISHED).order_by(
            "-published_at", "-pk"
        ),
        to_attr="published",
    )


def _visible_app(principal: Principal, slug: str) -> App:
    app = catalog.visible_apps(principal).filter(slug=slug).prefetch_related(_published()).first()
    if app is None or not app.published:
        raise NotFound(f"No app {slug!r} in your catalog.")
    return app


def _current_project(request, principal: Principal) -> Project | None:
    """The switcher's project, when the caller may still see it."""
    current = request.session.get(SESSION_PROJECT)
    if not current:
        return None
    return visible_projects(principal).filter(pk=current).first()


def gpu_needs(manifest: dict) -> dict:
    """GPUs an app takes: ``{"low", "high", "parameter"}`` (a range when a parameter sets them)."""
    gpus = manifest["resources"]["gpus"]
    if isinstance(gpus, int):
        return {"low": gpus, "high": gpus, "parameter": None}
    name = manifests.TEMPLATE.fullmatch(gpus.strip()).group(2)
    param = next((p for p in manifest.get("parameters", []) if p["name"] == name), {})
    values = [v for v in (param.get("choices") or [param.get("default")]) if isinstance(v, int)] or [0]
    return {
        "low": min(values),
        "high": max(values),
        "parameter": param.get("label") or name,
        "default": param.get("default"),
    }


def manifest_summary(manifest: dict) -> dict:
    """What the app page and the launch form say about a version."""
    ui = manifest.get("ui", {})
    decision = exposure.decide(manifest)
    mode, reason = decision.mode, decision.reason
    return {
        "gpus": gpu_needs(manifest),
        "resources": manifest["resources"],
        "endpoints": [
            {
                "name": e["name"],
                "protocol": e["protocol"],
                "exposure_modes": e["exposure_modes"],
                "proxied": "platform_proxy" in e["exposure_modes"],
                "proxy_mode": PROXY_MODE_LABELS.get(e.get("proxy", {}).get("mode", "path_prefix"), ""),
                "websocket": e.get("proxy", {}).get("websocket_required", False),
                "open_path": e.get("proxy", {}).get("default_open_path", ""),
            }
            for e in manifest["endpoints"]
        ],
        "ui": {
            "modes": [UI_MODE_LABELS.get(m, m) for m in ui.get("mode_supported", ["link_out"])],
            "requires_websocket": ui.get("requires_websocket", False),
            "path_prefix_safe": ui.get("path_prefix_safe", True),
            "same_origin_proxy_safe": ui.get("same_origin_proxy_safe", False),
            "cookie_constraints": ui.get("cookie_constraints", "").replace("_", " "),
            "mode": mode,
            "mode_label": UI_MODE_LABELS.get(mode, mode),
            "reason": reason,
        },
        "storage": manifest.get("storage", []),
        "parameters": manifest.get("parameters", []),
        "kind": manifest["execution"]["kind"],
    }


def _launch_target(principal: Principal, project: Project | None, app: App) -> dict:
    """Whether the Launch button shows, and why not when it does not."""
    if project is None:
        return {
            "can_launch": False,
            "launch_hint": "Choose a project in the switcher to launch apps into it.",
        }
    if not principal.can(Perm.INSTANCE_MANAGE, project.tenant_id, project.pk):
        return {"can_launch": False, "launch_hint": ""}
    if not catalog.is_entitled(app, project):
        return {"can_launch": False, "launch_hint": f"{project.name} is not entitled to {app.name}."}
    return {"can_launch": True, "launch_hint": ""}


# --- catalog -------------------------------------------------------------------


@require_safe
@portal_view
def app_catalog(request, principal):
    apps = list(catalog.visible_apps(principal).prefetch_related(_published()).order_by("name", "pk"))
    cards = []
    for app in apps:
        if not app.published:
            continue
        latest = app.published[0]
        cards.append({"app": app, "latest": latest, "gpus": gpu_needs(latest.manifest)})
    project = _current_project(request, principal)
    return render(
        request,
        "portal/catalog.html",
        {
            "cards": cards,
            "project": project,
            "can_view_instances": project is not None
            and principal.can(Perm.INSTANCE_VIEW, project.tenant_id, project.pk),
        },
    )


@require_safe
@portal_view
def app_detail(request, principal, slug):
    app = _visible_app(principal, slug)
    wanted = request.GET.get("version")
    version = next((v for v in app.published if v.version == wanted), app.published[0])
    project = _current_project(request, principal)
    return render(
        request,
        "portal/app_detail.html",
        {
            "app": app,
            "version": version,
            "versions": app.published,
            "summary": manifest_summary(version.manifest),
            "project": project,
            **_launch_target(principal, project, app),
        },
    )


# --- launch --------------------------------------------------------------------


def _placements(project: Project, needs: dict) -> list[Allocation]:
    """The project's ACTIVE allocations with ``free_gpus`` (one query), and ``full``
    when fewer are free than the least the app takes."""
    allocations = Allocation.objects.filter(project=project, state=Allocation.State.ACTIVE)
    placements = list(
        capacity.with_free_gpus(allocations).select_related("node", "flavor").order_by("node__hostname", "pk")
    )
    for allocation in placements:
        allocation.full = allocation.free_gpus < needs["low"]
    return placements


def _launch_initial(request, version: AppVersion, allocations: list[Allocation]) -> dict:
    """The form's starting values: the version, the first allocation that fits (or
    what the version switch carried over), and the manifest's defaults."""
    fits = next(
        (a for a in allocations if not a.full and a.node.credential_hash),
        allocations[0] if allocations else None,
    )
    initial = {"version": version.version, "allocation": str(fits.pk) if fits else ""}
    chosen = request.GET.get("allocation", "")
    if any(str(a.pk) == chosen and not a.full for a in allocations):
        initial["allocation"] = chosen
    if version.manifest.get("cluster"):
        initial["allocation"] = [initial["allocation"]] if initial["allocation"] else []
    if request.GET.get("name"):
        initial["name"] = request.GET["name"][:100]
    return initial


@require_http_methods(["GET", "HEAD", "POST"])
@portal_view
def app_launch(request, principal, pk, slug):
    project = scoped_project(principal, pk, Perm.INSTANCE_MANAGE)
    if request.session.get(SESSION_PROJECT) != str(project.pk):
        request.session[SESSION_PROJECT] = str(project.pk)
    app = _visible_app(principal, slug)
    data = request.POST if request.method == "POST" else request.GET
    version = next((v for v in app.published if v.version == data.get("version")), app.published[0])
    summary = manifest_summary(version.manifest)
    allocations = _placements(project, summary["gpus"])
    kwargs = {
        "manifest": version.manifest,
        "versions": app.published,
        "allocations": allocations,
        "secret_names": sorted(access.project_secret_names(project.pk)),
    }
    status = 200
    if request.method == "POST":
        form = LaunchForm(request.POST, **kwargs)
        cluster = bool(version.manifest.get("cluster"))
        if form.is_valid():
            values = form.cleaned_data
            # Not entitled (403: the project's, not the caller's), no room on the node (409),
            # too many launches (429), or values the service refused (400): the form says
            # which and where.
            with refusal_on(form, page_answers=(NotFound,)) as refused:
                operation = runtime.launch(
                    principal,
                    project,
                    app_slug=app.slug,
                    allocation_id=None if cluster else values["allocation"],
                    allocation_ids=values["allocation"] if cluster else None,
                    version=values["version"],
                    parameters=form.parameters(),
                    name=values["name"],
                )
            status = refused.status(request)
            if not refused:
                instance = operation.instance
                hostnames = ", ".join(
                    m.node.hostname for m in instance.members.select_related("node").order_by("rank")
                )
                messages.success(
                    request,
                    f"Launching {app.name} {instance.app_version.version} as {instance.name} on {hostnames}.",
                )
                return hx_redirect(request, reverse("instance_detail", args=[project.pk, instance.pk]))
    else:
        form = LaunchForm(initial=_launch_initial(request, version, allocations), **kwargs)
    context = {
        "project": project,
        "app": app,
        "version": version,
        "summary": summary,
        "form": form,
        "allocations": allocations,
        "entitled": catalog.is_entitled(app, project),
        "any_full": any(a.full for a in allocations),
        "all_full": all(a.full for a in allocations),
        "can_allocate": principal.can(Perm.ALLOCATION_MANAGE, project.tenant_id, project.pk),
    }
    return render_page_or_fragment(
        request, "portal/app_launch.html", "portal/partials/app_launch_form.html", context, status=status
    )
