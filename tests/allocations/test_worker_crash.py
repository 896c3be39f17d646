"""A Celery worker killed in the middle of provisioning loses nothing: within a
minute the reconciler of the next worker's beat hands the allocation to that
worker, which resumes at the recorded step without redoing the finished ones, and
the time nobody ran the step is not charged to the step's budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.db import connection

from apps.allocations import services
from apps.allocations.models import Allocation
from apps.tenancy import principal as principals
from tests.support.processes import celery_command, wait_for

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


# Production's lease and reconcile interval (the defaults); a budget for the OS
# deploy that the crash's own delay would exceed.
RESUME_GOAL_SECONDS = 60.0
OS_DEPLOY_BUDGET_SECONDS = 20


def start_worker(name: str, *options: str) -> subprocess.Popen:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "GPUAAS_CELERY_EAGER": "false",
        "GPUAAS_SIMULATED_STEP_SECONDS": "3",
        "GPUAAS_PIPELINE_POLL_SECONDS": "0.3",
        "GPUAAS_STEP_BUDGETS": json.dumps({"os_deploy": OS_DEPLOY_BUDGET_SECONDS}),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    return subprocess.Popen(
        celery_command(
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"{name}@%h",
            *options,
        ),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


# Generous: workers start slowly on a loaded machine.
SLOW = 120.0


def test_killed_worker_mid_deploy_resumes_on_another_within_a_minute(
    real_broker, settings, allocator, project, nodes, tmp_path, record_property
):
    settings.PIPELINE_POLL_SECONDS = 0.3
    first = start_worker("first")
    try:
        [allocation] = services.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
        wait_for(lambda: allocation.steps.filter(name="os_deploy", status="running").exists(), timeout=SLOW)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        killed_at = time.monotonic()
    finally:
        if first.poll() is None:
            first.kill()
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.PROVISIONING
    assert allocation.step == "os_deploy"

    # The replacement runs beat too, as production's single beat process would.
    second = start_worker("second", "--beat", "--schedule", str(tmp_path / "beat-schedule"))
    try:
        wait_for(
            lambda: allocation.steps.filter(name="os_deploy").exclude(status="running").exists(),
            timeout=RESUME_GOAL_SECONDS + 60,
        )
        resumed_after = time.monotonic() - killed_at
        wait_for(
            lambda: Allocation.objects.get(pk=allocation.pk).state != Allocation.State.PROVISIONING,
            timeout=SLOW,
        )
    finally:
        second.terminate()
        second.wait(timeout=10)
    record_property("resumed_after_seconds", round(resumed_after, 1))
    allocation.refresh_from_db()
    assert allocation.state == Allocation.State.ACTIVE, allocation.failure_reason  # not charged the crash
    assert resumed_after < RESUME_GOAL_SECONDS, f"resumed {resumed_after:.0f} s after the kill"
    network = allocation.steps.get(phase="provision", name="network")
    assert network.attempts == 1  # finished before the crash: not redone
    assert allocation.steps.get(phase="provision", name="os_deploy").status == "succeeded"
