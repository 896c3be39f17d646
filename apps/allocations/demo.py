"""Demo fleet: 16 approved ``h100-8x`` nodes and 8 ``h100-1x`` nodes, all available."""

import hashlib

from apps.allocations.models import Node
from apps.catalog.models import Flavor

FLEET = [("h100-8x", "gpu8", 16, "r1"), ("h100-1x", "gpu1", 8, "r2")]


def bootstrap(stdout) -> None:
    created = 0
    for flavor_name, prefix, count, rack in FLEET:
        flavor = Flavor.objects.get(name=flavor_name)
        for index in range(1, count + 1):
            _, made = Node.objects.get_or_create(
                hostname=f"{prefix}-{index:03d}.demo",
                defaults={
                    "flavor": flavor,
                    "rack": rack,
                    "state": Node.State.AVAILABLE,
                    "approved": True,
                    "bmc_address": f"10.{20 if rack == 'r1' else 21}.0.{index}",
                    "ib_guid": f"0x{hashlib.sha256(f'{prefix}-{index}'.encode()).hexdigest()[:16]}",
                    "switch_serial": f"FDO{rack.upper()}LEAF1",
                    "switch_port": f"Ethernet1/{index}",
                },
            )
            created += made
    stdout.write(f"allocations: {Node.objects.count()} nodes ({created} new)")
