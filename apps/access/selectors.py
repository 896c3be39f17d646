"""What other apps read of host access."""

from __future__ import annotations

DEFAULT_RUNTIME_USER = "gpuaas"


def runtime_user(allocation) -> str:
    """The name of the allocation's runtime user on its node: its flavor's, else ``gpuaas``."""
    return getattr(allocation.flavor, "runtime_user", "") or DEFAULT_RUNTIME_USER
