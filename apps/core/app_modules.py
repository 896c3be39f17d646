"""The project's apps' modules of one name (``demo``, ``schedule``), found by convention."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from django.apps import apps


def each(name: str) -> list[ModuleType]:
    """Every project app's ``<package>.<name>`` module, in INSTALLED_APPS order, for the
    apps that have one. Read from the app configs (their packages), not INSTALLED_APPS'
    strings: an entry may name an AppConfig class."""
    found = []
    for config in apps.get_app_configs():
        if not config.name.startswith("apps."):
            continue
        try:
            found.append(import_module(f"{config.name}.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.{name}":
                raise
    return found
