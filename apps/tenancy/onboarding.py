"""The asynchronous steps of tenant onboarding (seed 001 section 4.8): a VRF
from the pool (network) and the Lustre directory, NodeMap and PKey (storage).

Each step is idempotent, so a retry or the reconciler can run them again.
"""

from __future__ import annotations


class StepFailed(Exception):
    """``final=False``: may succeed later (retried); ``True``: the tenant fails."""

    def __init__(self, message: str, *, final: bool = False):
        super().__init__(message)
        self.final = final


def network(tenant) -> None:
    from apps.networking import services as networking

    try:
        networking.assign_tenant_network(tenant)
    except networking.PoolEmpty as exc:
        raise StepFailed("network: the VRF pool is empty; waiting for an operator to add capacity") from exc


def storage(tenant) -> None:
    from apps.core.drivers import DriverError
    from apps.storage import services as storage_services

    try:
        storage_services.provision_tenant_storage(tenant)
    except DriverError as exc:
        raise StepFailed(f"storage: {exc}", final=not exc.transient) from exc


STEPS = [network, storage]
