"""The demo tenant's Lustre directory, NodeMap and PKey (simulated)."""

from apps.storage import services
from apps.tenancy.models import Tenant


def bootstrap(stdout) -> None:
    storage = services.provision_tenant_storage(Tenant.objects.get(tenant_id="demo"))
    stdout.write(f"storage: {storage.path} (PKey {storage.pkey})")
