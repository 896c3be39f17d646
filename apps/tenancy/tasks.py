from __future__ import annotations

from celery import shared_task

from apps.tenancy import onboarding, services
from apps.tenancy.auth import trusted_issuers


@shared_task(bind=True, acks_late=True, max_retries=5, name="apps.tenancy.tasks.provision_tenant")
def provision_tenant(self, tenant_pk: str) -> None:
    try:
        services.provision_tenant(tenant_pk)
    except onboarding.StepFailed as exc:
        if not exc.final:
            raise self.retry(exc=exc, countdown=min(60, 2 ** self.request.retries * 5)) from exc


@shared_task(name="apps.tenancy.tasks.refresh_trusted_jwks")
def refresh_trusted_jwks() -> None:
    trusted_issuers.refresh_all()
