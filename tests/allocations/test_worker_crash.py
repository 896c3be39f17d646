"""A Celery worker killed in the middle of provisioning loses nothing: the
reconciler hands the allocation to the next worker, which resumes at the
recorded step without redoing the finished ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from apps.allocations import services
from apps.allocations.models import Allocation
from apps.tenancy import principal as principals
from gpuaas.celery import app as celery_app

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def start_worker(name: str) -> subprocess.Popen:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "GPUAAS_CELERY_EAGER": "false",
        "GPUAAS_SIMULATED_STEP_SECONDS": "3",
        "GPUAAS_PIPELINE_POLL_SECONDS": "0.3",
        "GPUAAS_PIPELINE_LEASE_SECONDS": "2",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpuaas",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"{name}@%h",
            "-l",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for(predicate, timeout=120.0):  # generous: workers start slowly on a loaded machine
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def real_broker():
    celery_app.conf.task_always_eager = False
    celery_app.connection_for_write().default_channel.client.flushdb()
    yield
    celery_app.conf.task_always_eager = True


def test_killed_worker_mid_deploy_resumes_on_another(real_broker, settings, allocator, project, nodes):
    settings.PIPELINE_POLL_SECONDS = 0.3
    first = start_worker("first")
    try:
        [allocation] = services.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
        wait_for(lambda: allocation.steps.filter(name="os_deploy", status="running").exists())
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.PROVISIONING and allocation.step == "os_deploy"

    second = start_worker("second")
    try:
        time.sleep(2.5)  # past the lease and the pipeline's grace for a lost wake-up
        services.reconcile_stuck(now=_later())
        wait_for(lambda: Allocation.objects.get(pk=allocation.pk).state == Allocation.State.ACTIVE)
    finally:
        second.terminate()
        second.wait(timeout=10)
    network = allocation.steps.get(phase="provision", name="network")
    assert network.attempts == 1  # finished before the crash: not redone
    assert allocation.steps.get(phase="provision", name="os_deploy").status == "succeeded"


def _later():
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() + timedelta(seconds=60)
