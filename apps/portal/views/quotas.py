"""A tenant's quotas: for each resource its limit, what is used and the 80 % and 90 %
warnings (seed 001 section 4.6.3), the numbers of CCP's ``GET /api/metering/quota``."""

from __future__ import annotations

from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from apps.metering import services
from apps.portal.htmx import render_fragment, render_page_or_fragment
from apps.portal.views.base import portal_view
from apps.tenancy import selectors as tenancy
from apps.tenancy.models import Tenant
from apps.tenancy.roles import Perm

# What each warning level says, in words as well as colour.
STATES = {
    "none": ("ok", "Within quota"),
    "80": ("warn", "Warning: 80 % of the limit or more"),
    "90": ("bad", "Critical: 90 % of the limit or more"),
}


def _tenant(principal, tenant_id: str) -> Tenant:
    return tenancy.tenant_for(principal, tenant_id, Perm.QUOTA_VIEW)


def _rows(tenant) -> list[dict]:
    lines = services.quota_report(tenant)
    fill = services.storage_fill(tenant)
    if fill is not None:
        lines[services.STORAGE_FILL] = fill
    rows = []
    for resource, line in lines.items():
        tone, state = STATES[line["warning"]] if line["limit"] is not None else ("muted", "No limit")
        rows.append({"resource": resource, **line, "tone": tone, "state": state})
    return rows


@require_safe
@portal_view
def tenant_quota(request, principal, tenant_id):
    tenant = _tenant(principal, tenant_id)
    rows = _rows(tenant)
    warned = [row for row in rows if row["warning"] != "none"]
    return render_page_or_fragment(
        request,
        "portal/quotas.html",
        "portal/partials/quota_table.html",
        {
            "tenant": tenant,
            "rows": rows,
            "warned": warned,
            "critical": any(row["warning"] == "90" for row in warned),
        },
        never_cache=True,
    )


@require_safe
@portal_view
def tenant_quota_gauges(request, principal, tenant_id):
    """The dashboard's gauges of a tenant's quotas: the quota page's numbers, loaded
    after the dashboard so that its own queries do not grow with its tenants."""
    tenant = _tenant(principal, tenant_id)
    response = render_fragment(
        request, "portal/partials/quota_gauges.html", {"tenant": tenant, "rows": _rows(tenant)}
    )
    add_never_cache_headers(response)
    return response
