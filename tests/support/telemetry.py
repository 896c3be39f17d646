"""GPU readings as agents report them, for the monitoring tests to feed either store."""

from __future__ import annotations

AGENT_TELEMETRY = "/api/agent/v1/telemetry"


def readings(start: float, end: float, every: int, *, gpus: int = 2, **values) -> list[dict]:
    """Readings of ``gpus`` GPUs every ``every`` seconds from ``start`` to ``end``; each
    GPU's values are the given ones plus its index (so GPUs are told apart)."""
    base = {
        "utilization": 50.0,
        "memory_used": 1000.0,
        "memory_free": 80000.0,
        "temperature": 40.0,
        "power": 300.0,
    }
    base.update(values)
    out, moment = [], start
    while moment <= end:
        for gpu in range(gpus):
            out.append(
                {"gpu": gpu, "uuid": f"GPU-test-{gpu}", "at": moment, **{k: v + gpu for k, v in base.items()}}
            )
        moment += every
    return out
