"""Where a route's app serves an endpoint: its base path, the same in both route
modes (CONTRACT.md). The runtime renders it into the agent's start task, through
``rendering.provide_base_path`` (the proxy sits above it)."""

from __future__ import annotations


def base_path(instance_id, endpoint: str) -> str:
    return f"/w/{instance_id}/{endpoint}/"
