"""The asynchronous steps of tenant onboarding (seed 001 section 4.8): a VRF
from the pool (network) and the Lustre directory, NodeMap and PKey (storage).

The domains that own those steps sit above tenancy: each registers its step in
its ``AppConfig.ready()``, so tenancy never imports them. Steps run in the order
their apps are installed (networking before storage). Each step is idempotent,
so a retry or the reconciler can run them again.
"""

from __future__ import annotations

from collections.abc import Callable


class StepFailed(Exception):
    """``final=False``: may succeed later (retried); ``True``: the tenant fails."""

    def __init__(self, message: str, *, final: bool = False):
        super().__init__(message)
        self.final = final


STEPS: list[Callable[[object], None]] = []


def register_step(step: Callable[[object], None]) -> None:
    """``step(tenant)`` provisions the tenant's share of a domain, or raises ``StepFailed``."""
    if step not in STEPS:
        STEPS.append(step)
