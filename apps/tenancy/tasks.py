from __future__ import annotations

import logging

from celery import shared_task

from apps.tenancy import onboarding, services
from apps.tenancy.auth import trusted_issuers

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, name="apps.tenancy.tasks.provision_tenant")
def provision_tenant(tenant_pk: str) -> None:
    try:
        services.provision_tenant(tenant_pk)
    except onboarding.StepFailed as exc:
        # The tenant keeps the reason in status_reason; resume_onboarding retries it every minute.
        logger.warning("onboarding of tenant %s is waiting: %s", tenant_pk, exc)


@shared_task(name="apps.tenancy.tasks.refresh_trusted_jwks")
def refresh_trusted_jwks() -> None:
    trusted_issuers.refresh_all()


@shared_task(name="apps.tenancy.tasks.resume_onboarding")
def resume_onboarding() -> int:
    """Tenants still onboarding (waiting for VRF capacity, a storage retry) try again."""
    pending = services.tenants_waiting_for_onboarding()
    for tenant_pk in pending:
        provision_tenant.delay(str(tenant_pk))
    return len(pending)
