"""Beat schedule gathered from every app's ``schedule.BEAT_SCHEDULE``."""

from importlib import import_module

from django.conf import settings


def beat_schedule() -> dict:
    schedule: dict = {}
    for app in settings.INSTALLED_APPS:
        if not app.startswith("apps."):
            continue
        try:
            module = import_module(f"{app}.schedule")
        except ModuleNotFoundError as exc:
            if exc.name != f"{app}.schedule":
                raise
            continue
        schedule.update(module.BEAT_SCHEDULE)
    return schedule
