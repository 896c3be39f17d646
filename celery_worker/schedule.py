"""Beat schedule gathered from every app's ``schedule.BEAT_SCHEDULE``."""

from importlib import import_module

from django.apps import apps


def beat_schedule() -> dict:
    schedule: dict = {}
    # The apps' packages, not INSTALLED_APPS' strings: an entry may name an AppConfig class.
    for config in apps.get_app_configs():
        if not config.name.startswith("apps."):
            continue
        try:
            module = import_module(f"{config.name}.schedule")
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.schedule":
                raise
            continue
        schedule.update(module.BEAT_SCHEDULE)
    return schedule
