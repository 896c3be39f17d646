import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuaas.settings")

app = Celery("gpuaas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_beat_schedule(sender, **kwargs):
    # Each app declares its periodic tasks in ``<app>/schedule.py``.
    from celery_worker.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()


@signals.setup_logging.connect(weak=False)
def _keep_django_logging(**kwargs):
    """Django's LOGGING configures logging, in workers too. Without a receiver here
    Celery would set the root logger to the worker's level (WARNING in the embedded
    worker), silencing every INFO line of the process it runs in: the web server's
    access lines and audit events under ``serve``."""
