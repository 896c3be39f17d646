"""The embedded default's background services: a Celery worker on the memory
broker and Celery beat as threads of the web process (see DESIGN.md field
notes), and one local node agent as a child process (so an agent crash never
takes the web server down)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import warnings

from django.conf import settings

logger = logging.getLogger(__name__)


def start_celery_worker() -> threading.Thread:
    from celery.exceptions import SecurityWarning

    from gpuaas.celery import app

    # Celery warns when its worker runs as root, aimed at shared worker hosts; here
    # it is a thread of the developer's own web process, which runs as whoever ran it.
    warnings.filterwarnings("ignore", category=SecurityWarning)

    def run():
        worker = app.Worker(
            pool="threads",
            concurrency=4,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            loglevel="WARNING",
            quiet=True,
        )
        worker.start()

    thread = threading.Thread(target=run, name="celery-worker", daemon=True)
    thread.start()
    return thread


def start_celery_beat() -> threading.Thread:
    from celery.beat import EmbeddedService

    from gpuaas.celery import app

    schedule = str(settings.VAR_DIR / "celerybeat-schedule")
    service = EmbeddedService(app, thread=True, schedule_filename=schedule)
    service.start()
    return service


def start_all() -> None:
    start_celery_worker()
    start_celery_beat()
    logger.info("embedded worker and beat started")


# The local agent serves the first h100-1x node by hostname: allocation hands out
# free nodes in hostname order, so the demo's first one-GPU allocation lands on it
# and apps launched there really run (as local processes). Other demo nodes have
# no agent; apps launched on them stay "requested".
LOCAL_AGENT_FLAVOR = "h100-1x"


def local_agent_node():
    from apps.allocations.models import Node

    return Node.objects.filter(flavor__name=LOCAL_AGENT_FLAVOR).order_by("hostname").first()


def start_local_agent(host: str, port: int) -> subprocess.Popen | None:
    node = local_agent_node()
    if node is None:
        logger.warning("no %s node for the local agent; run `manage.py bootstrap_demo`", LOCAL_AGENT_FLAVOR)
        return None
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"  # serve binds loopback only
    command = [
        sys.executable,
        str(settings.BASE_DIR / "manage.py"),
        "run_node_agent",
        "--node",
        node.hostname,
        "--url",
        url,
        "--executor",
        "process",
    ]
    logger.info("local node agent for %s started", node.hostname)
    return subprocess.Popen(command)


def stop_local_agent(agent: subprocess.Popen | None) -> None:
    """SIGTERM lets it finish a task in progress; its workloads keep running and
    the next ``serve`` adopts them again."""
    if agent is None or agent.poll() is not None:
        return
    agent.terminate()
    try:
        agent.wait(timeout=15)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
