import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuaas.settings")

app = Celery("gpuaas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_beat_schedule(sender, **kwargs):
    # Each app declares its periodic tasks in ``<app>/schedule.py``.
    from celery_worker.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()
