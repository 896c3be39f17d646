from __future__ import annotations

from celery import shared_task

from apps.metering import services
from apps.tenancy.models import Tenant


@shared_task(name="apps.metering.tasks.check_quota_thresholds")
def check_quota_thresholds(tenant_pk: str) -> int:
    tenant = Tenant.objects.filter(pk=tenant_pk).first()
    return len(services.check_quota_thresholds(tenant)) if tenant else 0


@shared_task(name="apps.metering.tasks.sweep_quota_thresholds")
def sweep_quota_thresholds() -> int:
    """Every limited tenant: what was given back (a release, a deleted instance, a
    smaller directory) re-arms its warnings without a request to notice it."""
    return sum(len(services.check_quota_thresholds(tenant)) for tenant in services.tenants_with_limits())
