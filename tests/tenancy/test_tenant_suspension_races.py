"""Operators suspending one tenant at the same moment (decision 0078). Apart from
test_tenant_suspension.py, whose tests share data made once per module in a transaction
that these committing threads could not see."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEvent
from apps.tenancy import principal as principals
from apps.tenancy import services
from apps.tenancy.models import Tenant
from tests.factories import TenantFactory
from tests.support.concurrency import at_once

REASON = "invoice 2025-10 unpaid"


@pytest.mark.django_db(transaction=True)
@pytest.mark.production
def test_operators_suspending_at_once_suspend_once(platform_admin):
    tenant = TenantFactory()
    admin = principals.for_user(platform_admin)
    results = at_once([lambda: services.suspend_tenant(admin, tenant, REASON)] * 4)
    assert {result.status for result in results} == {Tenant.Status.SUSPENDED}
    assert AuditEvent.objects.filter(action="tenant.suspend").count() == 1
