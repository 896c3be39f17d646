"""What other apps read of the tenancy."""

from __future__ import annotations

from apps.tenancy import policy
from apps.tenancy.models import Tenant
from apps.tenancy.principal import Principal
from apps.tenancy.roles import Perm


def tenant_for(principal: Principal, tenant_id: str, action_perm: str | None = None) -> Tenant:
    """The tenant of that CCP domain id if the caller may see it (else 404), checked for
    ``action_perm`` (else 403)."""
    return policy.get_object(
        Tenant.objects.all(), principal, Perm.TENANT_VIEW, action_perm, tenant_id=tenant_id
    )
