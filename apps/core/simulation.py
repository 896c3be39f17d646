"""Shared machinery of the simulated drivers: state in the database, latency,
and fault injection from ``SimulatedFault`` rows."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.core.drivers import DriverError
from apps.core.models import SimulatedFault, SimulatedResource

HANG = "hang"


def latency() -> timedelta:
    return timedelta(seconds=settings.SIMULATED_STEP_SECONDS)


def ready_at() -> str:
    """When an operation started now finishes in the simulated world."""
    return (timezone.now() + latency()).isoformat()


def is_ready(moment: str | None) -> bool:
    return moment is not None and timezone.now().isoformat() >= moment


def get(system: str, kind: str, key: str) -> SimulatedResource | None:
    return SimulatedResource.objects.filter(system=system, kind=kind, key=key).first()


def put(system: str, kind: str, key: str, **state) -> SimulatedResource:
    resource, _ = SimulatedResource.objects.update_or_create(
        system=system, kind=kind, key=key, defaults={"state": state}
    )
    return resource


@contextmanager
def locked(system: str, kind: str, key: str, **initial) -> Iterator[SimulatedResource | None]:
    """The resource, locked until the block ends, for a read-modify-write that a
    concurrent one cannot undo (two nodes of a tenant joining its NodeMap at once).
    With ``initial``, a missing resource is created with that state first."""
    if initial:
        SimulatedResource.objects.get_or_create(
            system=system, kind=kind, key=key, defaults={"state": initial}
        )
    with transaction.atomic():
        yield SimulatedResource.objects.select_for_update().filter(system=system, kind=kind, key=key).first()


def update(resource: SimulatedResource, **changes) -> SimulatedResource:
    resource.state = {**resource.state, **changes}
    resource.save(update_fields=["state", "updated_at"])
    return resource


def delete(system: str, kind: str, key: str) -> None:
    SimulatedResource.objects.filter(system=system, kind=kind, key=key).delete()


def inject(system: str, operation: str, target: str = "") -> str | None:
    """Raise the configured failure for this call, or return ``"hang"``.

    A fault with ``remaining`` fails that many calls and then stops matching.
    """
    faults = SimulatedFault.objects.filter(system=system, operation=operation).exclude(remaining=0)
    for fault in faults:
        if fault.target and fault.target != target:
            continue
        if fault.probability < 1 and random.random() >= fault.probability:
            continue
        if fault.remaining is not None:
            with transaction.atomic():
                claimed = SimulatedFault.objects.filter(pk=fault.pk, remaining__gt=0).update(
                    remaining=F("remaining") - 1
                )
            if not claimed:
                continue
        if fault.mode == SimulatedFault.Mode.HANG:
            return HANG
        raise DriverError(
            fault.message or f"simulated {system} {operation} failure on {target or 'any'}",
            hardware=fault.hardware,
        )
    return None
