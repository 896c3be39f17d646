"""The asynchronous steps of tenant onboarding (seed 001 section 4.8).

The network step (VRF/VLAN from the pool, NDFC) and the storage step (DDN
directory, NodeMap, UFM PKey) belong to ``apps.networking`` and
``apps.storage`` and are added to ``STEPS`` when those domains exist; until
then onboarding has no external step and the tenant becomes active at once.
"""

from __future__ import annotations


class StepFailed(Exception):
    """``final=False``: the step may succeed later (retry); ``True``: give up."""

    def __init__(self, message: str, *, final: bool = False):
        super().__init__(message)
        self.final = final


STEPS: list = []
