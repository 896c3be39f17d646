"""Counters in the shared cache (Redis in production), for rate limits and circuit breakers."""

from __future__ import annotations

from django.core.cache import cache


def increment(key: str, timeout: float) -> int:
    """Add one to ``key`` (created with ``timeout``) and return the new count."""
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=timeout)
        return 1
