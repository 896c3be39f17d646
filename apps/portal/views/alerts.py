"""The alerts list: what fired in the caller's tenants, newest first, by state,
severity, rule and tenant; from the same service as ``GET /api/alerts``."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.views.decorators.http import require_safe

from apps.monitoring.alerts import services as alerts
from apps.monitoring.models import AlertRule
from apps.portal import queries
from apps.portal.htmx import render_page_or_fragment
from apps.portal.views.base import portal_view

ALERTS_PER_PAGE = 50
TENANT_CHOICES = 200


@require_safe
@portal_view
def alert_list(request, principal):
    tenants = list(queries.visible_tenants(principal)[:TENANT_CHOICES])
    rules = list(AlertRule.objects.values_list("name", flat=True))
    # Filters from the query string; a value that is not one of the choices narrows nothing.
    chosen = {
        "state": _choice(request, "state", alerts.LISTED_STATES),
        "severity": _choice(request, "severity", AlertRule.Severity.values),
        "rule": _choice(request, "rule", rules),
        "tenant": _choice(request, "tenant", [t.tenant_id for t in tenants]),
    }
    found = alerts.visible_alerts(
        principal, tenant_id=chosen["tenant"] or None, state=chosen["state"] or None
    )
    if chosen["severity"]:
        found = found.filter(severity=chosen["severity"])
    if chosen["rule"]:
        found = found.filter(rule_id=chosen["rule"])
    page = Paginator(found, ALERTS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "page_obj": page,
        "chosen": chosen,
        "states": alerts.LISTED_STATES,
        "severities": AlertRule.Severity.values,
        "rules": rules,
        "tenants": tenants if len(tenants) > 1 else [],
        "filtered": any(chosen.values()),
    }
    return render_page_or_fragment(
        request, "portal/alerts.html", "portal/partials/alert_results.html", context
    )


def _choice(request, name: str, choices) -> str:
    value = request.GET.get(name, "")
    return value if value in choices else ""
