"""Measured GPU utilization beside billed GPU-hours (``GET /api/metering/usage``).

Metering sits below monitoring, which holds the GPU samples: monitoring registers a
provider here in its ``AppConfig.ready()`` and metering never imports it. Without a
provider, or for a project it has no samples of, utilization is ``None`` (null in the
API): not measured is not 0 %.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

# provider(tenant, start, end) -> {project pk: mean DCGM_FI_DEV_GPU_UTIL in percent,
# over the project's GPUs while its allocations held them in [start, end)}
Provider = Callable[[object, datetime, datetime], dict[UUID, float | None]]

_providers: list[Provider] = []


def register_provider(provider: Provider) -> None:
    if provider not in _providers:
        _providers.append(provider)


def measured(tenant, start: datetime, end: datetime) -> dict[UUID, float | None]:
    found: dict[UUID, float | None] = {}
    for provider in _providers:
        for project, percent in provider(tenant, start, end).items():
            if percent is not None:
                found[project] = round(float(percent), 1)
    return found
