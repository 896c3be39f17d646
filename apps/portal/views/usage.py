"""A tenant's usage and charges by month, and the billing CSV download, for tenant
and billing administrators (the same numbers as CCP's metering API)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from apps.core.errors import ValidationFailed, error_json
from apps.metering import billing, usage
from apps.metering import selectors as pricing
from apps.portal.htmx import render_fragment
from apps.portal.views.base import portal_view
from apps.tenancy import selectors as tenancy
from apps.tenancy.models import Tenant
from apps.tenancy.roles import Perm

MONTHS_OFFERED = 12
# The dashboard's chart: GPU-hours per UTC day over the last two weeks, today included.
CHART_DAYS = 14


def _months(now: datetime) -> list[str]:
    year, month = now.year, now.month
    offered = []
    for _ in range(MONTHS_OFFERED):
        offered.append(f"{year:04d}-{month:02d}")
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
    return offered


def _tenant(principal, tenant_id: str) -> Tenant:
    return tenancy.tenant_for(principal, tenant_id, Perm.USAGE_VIEW)


@require_safe
@portal_view
def tenant_usage_daily(request, principal, tenant_id):
    """The dashboard chart's data: GPU-hours per day per project, from the usage
    service that ``GET /api/metering/usage`` answers from."""
    tenant = _tenant(principal, tenant_id)
    now = timezone.now().astimezone(UTC)
    tomorrow = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    body = usage.by_day(tenant, tomorrow - timedelta(days=CHART_DAYS), tomorrow)
    return JsonResponse(
        {"tenant_id": tenant.tenant_id, "unit": "GPU-hours", **body}, headers={"Cache-Control": "no-store"}
    )


@require_safe
@portal_view
def tenant_charges_daily(request, principal, tenant_id):
    """The usage page chart's data: a month's charges per day per project, priced by
    the billing service the CSV export prices with; up to today in the current month."""
    tenant = _tenant(principal, tenant_id)
    try:
        start, end = usage.period(request.GET.get("month"))
    except ValidationFailed as exc:
        return error_json(exc.status_code, exc.code, exc.message, exc.details)
    now = timezone.now().astimezone(UTC)
    end = min(end, now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1))
    body = billing.by_day(tenant, start, end) if start < end else {"days": [], "projects": []}
    return JsonResponse(
        {"tenant_id": tenant.tenant_id, "unit": settings.BILLING_CURRENCY, **body},
        headers={"Cache-Control": "no-store"},
    )


@require_safe
@portal_view
def tenant_spend(request, principal, tenant_id):
    """The dashboard's month-to-date spend of a tenant, the total its usage page shows,
    loaded after the dashboard so that its own queries do not grow with its tenants."""
    tenant = _tenant(principal, tenant_id)
    response = render_fragment(
        request,
        "portal/partials/tenant_spend.html",
        {"tenant": tenant, "spend": pricing.month_to_date(tenant), "month": f"{timezone.now():%Y-%m}"},
    )
    add_never_cache_headers(response)
    return response


@require_safe
@portal_view
def tenant_usage(request, principal, tenant_id):
    tenant = _tenant(principal, tenant_id)
    now = timezone.now()
    month = request.GET.get("month") or f"{now:%Y-%m}"
    error, status = "", 200
    try:
        start, end = usage.period(month)
    except ValidationFailed:
        error, status, month = "Choose a month as YYYY-MM.", 400, f"{now:%Y-%m}"
        start, end = usage.period(month)
    if request.GET.get("format") == "csv" and not error:
        return billing.csv_response(billing.export(principal, tenant, start, end), tenant, start)
    rows, record = billing.statement(tenant, start, end)
    return render(
        request,
        "portal/usage.html",
        {
            "tenant": tenant,
            "month": month,
            "months": sorted(set(_months(now)) | {month}, reverse=True),
            "so_far": start <= now < end,
            "rows": rows,
            "exported": record,
            "month_start": start,
            "month_end": end,
            "total": sum((row.amount for row in rows), start=Decimal(0)),
            "currency": settings.BILLING_CURRENCY,
            "error": error,
        },
        status=status,
    )
