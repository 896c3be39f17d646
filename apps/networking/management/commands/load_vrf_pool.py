"""``load_vrf_pool --prefix vrf --count 32 --first-vni 50001 --first-vlan 1000``

Adds pre-created VRFs (each with four VLANs) to the pool; names that exist are
skipped. Tenants waiting for a VRF resume onboarding.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from apps.networking import services


class Command(BaseCommand):
    help = "Add pre-created VRFs with their four VLANs to the pool."

    def add_arguments(self, parser):
        parser.add_argument("--prefix", default="vrf")
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--first-vni", type=int, required=True)
        parser.add_argument("--first-vlan", type=int, required=True)

    def handle(self, *args, prefix, count, first_vni, first_vlan, **options):
        if count < 1 or not 2 <= first_vlan <= 4095 - 4 * count:
            raise CommandError("count must be positive and every VLAN id between 2 and 4094")
        try:
            created = services.load_pool(
                prefix=prefix, count=count, first_vni=first_vni, first_vlan=first_vlan
            )
        except IntegrityError as exc:
            raise CommandError(f"a VNI or VLAN id in that range is already used: {exc}") from exc
        self.stdout.write(f"{created} VRF(s) added; {services.free_vrf_count()} free")
