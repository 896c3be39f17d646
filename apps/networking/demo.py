"""Demo VRF pool (32 VRFs) and the demo tenant's network."""

from apps.networking import services
from apps.networking.models import Vrf
from apps.tenancy.models import Tenant

POOL = {"prefix": "vrf-demo", "count": 32, "first_vni": 50001, "first_vlan": 1000}


def bootstrap(stdout) -> None:
    services.load_pool(**POOL)
    tenant = Tenant.objects.get(tenant_id="demo")
    services.assign_tenant_network(tenant)
    free = Vrf.objects.filter(tenant__isnull=True).count()
    stdout.write(f"networking: VRF pool of {Vrf.objects.count()} ({free} free); demo tenant has its VRF")
