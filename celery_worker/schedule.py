"""Beat schedule gathered from every app's ``schedule.BEAT_SCHEDULE``."""

from apps.core import app_modules


def beat_schedule() -> dict:
    schedule: dict = {}
    for module in app_modules.each("schedule"):
        schedule.update(module.BEAT_SCHEDULE)
    return schedule
