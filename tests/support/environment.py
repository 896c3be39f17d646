"""The environment both test settings (PostgreSQL and the embedded default's SQLite)
give the platform before its settings load."""

from __future__ import annotations

import os


def set_test_defaults() -> None:
    """Keys no deployment uses, Celery tasks run in the caller, simulated hardware
    without its delays, and log lines on the console, where pytest captures them (and
    the processes a test starts write them to their output), not in var/log/."""
    os.environ.setdefault("GPUAAS_SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")
    os.environ.setdefault("GPUAAS_ENCRYPTION_KEYS", "7qWutnD6fSYzo4mOWFApzU7RMK8droX-w4WLUJ5hkGc=")
    os.environ.setdefault("GPUAAS_CELERY_EAGER", "true")
    os.environ.setdefault("GPUAAS_SIMULATED_STEP_SECONDS", "0")
    os.environ.setdefault("GPUAAS_LOG_FORMAT", "json")
