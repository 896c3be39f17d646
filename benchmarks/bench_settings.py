"""Production settings (``gpuaas.settings``) with the benchmark's own Celery queue.

Benchmarks share one Redis with other checkouts and test runs. Two runs on the
same Redis database and the default ``celery`` queue would take each other's
tasks (and answer them against the wrong PostgreSQL database), so a run that
starts Celery workers names its own queue in ``GPUAAS_BENCH_QUEUE``; the web
process publishes to it and the worker (``-Q``) consumes it. Nothing else differs.
"""

import os

from gpuaas.settings import *  # noqa: F403

CELERY_TASK_DEFAULT_QUEUE = os.environ.get("GPUAAS_BENCH_QUEUE", "celery")
# Task results are still stored (as in production); they just do not outlive the run by a day.
CELERY_RESULT_EXPIRES = 600
