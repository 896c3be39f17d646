from __future__ import annotations

from decimal import Decimal

from django import template
from django.conf import settings
from django.template.defaulttags import querystring
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from apps.allocations.models import AllocationStep
from apps.proxy.idle import human_duration
from apps.tenancy.models import Project, Tenant

register = template.Library()

# Which navigation entry a page belongs to, by URL name.
SECTIONS = {
    "dashboard": "dashboard",
    "project_list": "projects",
    "project_create": "projects",
    "project_detail": "projects",
    "project_members": "projects",
    "project_service_accounts": "projects",
    "member_remove": "projects",
    "service_account_revoke": "projects",
    "audit_log": "audit",
    "alert_list": "alerts",
    "allocation_list": "allocations",
    "allocation_create": "allocations",
    "allocation_detail": "allocations",
    "allocation_release": "allocations",
    "app_catalog": "apps",
    "app_detail": "apps",
    "app_launch": "apps",
    "instance_list": "apps",
    "instance_detail": "apps",
    "instance_action": "apps",
    "instance_share": "apps",
    "tenant_quota": "dashboard",
}

TONES = {
    "active": "ok",
    "success": "ok",
    "onboarding": "info",
    "failed": "bad",
    "failure": "bad",
    "denied": "warn",
    "suspended": "muted",
    "revoked": "muted",
    "firing": "bad",
    "critical": "bad",
    "warning": "warn",
    "resolved": "ok",
}

QUOTA_LABELS = {
    "gpus": "GPUs",
    "nodes": "Nodes",
    "storage_gb": "Storage (GB)",
    "storage_used_gb": "Storage used (GB of the directory)",
    "app_instances": "App instances",
}


@register.simple_tag(takes_context=True)
def nav_current(context, section: str) -> str:
    """``aria-current="page"`` on the navigation entry of the page being shown."""
    match = getattr(context.get("request"), "resolver_match", None)
    if match is not None and SECTIONS.get(match.url_name) == section:
        return mark_safe('aria-current="page"')  # a constant
    return ""


@register.simple_tag(takes_context=True)
def page_tenant(context) -> Tenant | None:
    """The tenant a page is about: its project's, its own (usage, quota), else the
    switcher's current project's."""
    project, tenant, nav = context.get("project"), context.get("tenant"), context.get("nav")
    if isinstance(project, Project):
        return project.tenant
    if isinstance(tenant, Tenant):
        return tenant
    current = nav.current_project if nav is not None else None
    return current.tenant if current is not None else None


@register.simple_tag
def badge(value, label: str | None = None) -> str:
    value = str(value or "")
    return format_html(
        '<span class="badge badge-{}">{}</span>',
        TONES.get(value, "muted"),
        label or value.replace("_", " ").capitalize(),
    )


@register.simple_tag(takes_context=True)
def page_query(context, param: str, number) -> str:
    """``{% querystring %}`` for a page parameter named by a variable: a tab with two
    paged lists gives each its own (``page``, ``tenant_page``)."""
    return querystring(context, **{param: number})


@register.filter
def meter_step(percent: float) -> int:
    """A bar's width class (``pct-N``) in 5 % steps: the CSP allows no inline style."""
    return int(min(100, max(0, 5 * round(percent / 5))))


# What each way of showing an app's web page means to the person opening it.
UI_MODE_HELP = {
    "embedded": "it opens inside the portal",
    "link_out": "it opens in a tab of its own",
    "native": "it has no web page in the portal; reach it with its own client or over SSH",
}


@register.filter
def ui_mode_help(mode: str) -> str:
    return UI_MODE_HELP.get(mode, "")


@register.filter
def key_words(key: str) -> str:
    """A machine key as words (``node_offline``: "Node offline")."""
    return str(key).replace("_", " ").capitalize()


@register.filter
def step_label(name: str) -> str:
    return AllocationStep.label_for(name)


@register.filter
def quota_label(resource: str) -> str:
    return QUOTA_LABELS.get(resource, resource.replace("_", " ").capitalize())


@register.filter
def ago(moment) -> str:
    """``3 hours ago``; ``just now`` under a minute (``timesince`` would say ``0 minutes``)."""
    if not moment:
        return ""
    if (timezone.now() - moment).total_seconds() < 60:
        return "just now"
    return f"{timesince(moment, depth=1)} ago"


@register.filter
def duration(seconds) -> str:
    return human_duration(int(seconds))


@register.filter
def thousands(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


# Symbols for the currencies a billing currency is likely to be; any other shows its code.
CURRENCY_SYMBOLS = {"USD": "$", "EUR": "\u20ac", "GBP": "\u00a3", "JPY": "\u00a5"}


@register.filter
def money(amount) -> str:
    """An amount in the billing currency, as the rate cards price it: ``$1,234.56``."""
    if amount is None or amount == "":
        return ""
    code = settings.BILLING_CURRENCY
    figure = f"{Decimal(amount):,.2f}"
    symbol = CURRENCY_SYMBOLS.get(code)
    return f"{symbol}{figure}" if symbol else f"{figure} {code}"


@register.filter
def uptime(since) -> str:
    """How long since ``since``, in its two largest units (``3 days, 4 hours``)."""
    if not since:
        return ""
    return timesince(since, depth=2)
