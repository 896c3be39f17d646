"""What every hardware/external-system driver shares: errors, selection by
``GPUAAS_DRIVERS``, and a circuit breaker."""

from __future__ import annotations

import logging
import time
from importlib import import_module

from django.conf import settings
from django.core.cache import cache

from apps.core import counters

logger = logging.getLogger(__name__)
_warned: set[str] = set()


class DriverError(Exception):
    """A failed call to an external system.

    ``hardware``: the machine itself is at fault (the node goes to ``failed``
    for an operator instead of back to the pool). ``transient``: worth retrying.
    """

    def __init__(self, message: str, *, hardware: bool = False, transient: bool = True):
        super().__init__(message)
        self.hardware = hardware
        self.transient = transient


class CircuitOpen(DriverError):
    pass


# Every system ``GPUAAS_DRIVERS`` names (the settings check the same set).
SYSTEMS = ("maas", "ndfc", "ufm", "ddn", "metrics")


def mode(system: str) -> str:
    """``simulated`` or ``real`` for one system (``maas``, ``ndfc``, ``ufm``, ``ddn``)."""
    return settings.DRIVERS.get(system, settings.DRIVERS.get("*", "simulated"))


def simulated_systems() -> list[str]:
    """The systems whose simulated driver runs (none in a production of real drivers only)."""
    return [system for system in SYSTEMS if mode(system) == "simulated"]


def load(system: str, implementations: dict[str, str]):
    """Instantiate the driver class named for this system's mode."""
    wanted = mode(system)
    if wanted not in implementations:
        if system not in _warned:
            _warned.add(system)
            logger.warning("no %s driver for %s; using the simulated one", wanted, system)
        wanted = "simulated"
    path = implementations[wanted]
    module_name, class_name = path.rsplit(".", 1)
    return getattr(import_module(module_name), class_name)()


class CircuitBreaker:
    """Opens after ``threshold`` failures within ``window`` seconds, for ``window``
    seconds; counters live in the shared cache so every worker sees them."""

    def __init__(self, name: str, *, threshold: int, window: int):
        self.name, self.threshold, self.window = name, threshold, window

    def _key(self, suffix: str) -> str:
        return f"circuit:{self.name}:{suffix}"

    def is_open(self) -> bool:
        return cache.get(self._key("open")) is not None

    def retry_after(self) -> int:
        opened = cache.get(self._key("open"))
        return max(1, int(self.window - (time.time() - opened))) if opened else 0

    def record_failure(self) -> None:
        bucket = self._key(f"failures:{int(time.time() // self.window)}")
        failures = counters.increment(bucket, self.window * 2)
        if failures >= self.threshold:
            cache.set(self._key("open"), time.time(), timeout=self.window)

    def record_success(self) -> None:
        cache.delete(self._key("open"))
