"""Launch-to-running of JupyterLab through the node agent.

Serves the portal in production mode (``manage.py serve``, PostgreSQL, Redis
channel layer), runs a real node agent (``python -m node_agent``,
process executor) for one node, and launches JupyterLab through the API with a
project service account's token, again and again. For each launch it prints
the time from the API call to ``running`` split into the app's own start (the
agent's work: spawn Jupyter and wait until it answers) and the platform's
overhead (everything else: API, task hand-off, report), and the agent's task
fetch latency (task created -> claimed by the long-polling agent) over every
task of the run.

    .venv/bin/python benchmarks/runtime.py            # 5 launches
    .venv/bin/python benchmarks/runtime.py --quick    # 1 launch, CI smoke

Needs PostgreSQL and Redis (``make services``) and JupyterLab installed
(``pip install -e .[dev]``). Compare figures only within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from urllib.parse import urlencode

import httpx

# harness puts the repository root on sys.path: imported before apps, gpuaas and tests.
from harness import (
    benchmark_parser,
    load_average,
    percentile,
    portal_with_agent,
    print_table,
    seed_jupyterlab_allocation,
    wait_for,
)


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(__doc__, quick="one launch (CI smoke)", db_name="gpuaas_bench_runtime")
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    args = parser.parse_args()
    if args.quick:
        args.launches = 1
    return args


def seed() -> dict:
    """A tenant with an ACTIVE allocation of one node, JupyterLab published, a project service account."""
    from apps.tenancy import services as tenancy
    from apps.tenancy.principal import Grant, Principal

    seeded = seed_jupyterlab_allocation(flavor_name="h100-1x", gpus=1, cpu_cores=16, memory_gb=256)
    project = seeded["project"]
    operator = Principal(
        kind="operator", key="operator:bench", name="benchmark", grants=[Grant("platform_admin")]
    )
    issued = tenancy.create_service_account(operator, project, name="bench", role="project_admin")
    return {
        "project": project,
        "node": seeded["node"],
        "allocation": seeded["allocation"],
        "client_id": issued.account.client_id,
        "client_secret": issued.client_secret,
    }


def launch_once(client: httpx.Client, data: dict) -> dict:
    from apps.runtime.models import AgentTask, AppInstance

    base = f"/api/v1/projects/{data['project'].pk}/app-instances"
    started = time.perf_counter()
    response = client.post(base, json={"app": "jupyterlab", "allocation_id": str(data["allocation"].pk)})
    response.raise_for_status()
    accepted = time.perf_counter()
    instance_id = response.json()["instance_id"]
    # Polled every 50 ms: the launch is timed by it, and the default 200 ms would show in the figures.
    wait_for(
        lambda: client.get(f"{base}/{instance_id}").json()["state"] in ("running", "failed"),
        timeout=180,
        what="running",
        interval=0.05,
    )
    running = time.perf_counter()
    instance = AppInstance.objects.get(pk=instance_id)
    if instance.state != "running":
        raise RuntimeError(f"launch failed: {instance.state_reason}")
    task = AgentTask.objects.get(instance_id=instance_id, action="start")
    total = running - started
    app_start = (task.finished_at - task.claimed_at).total_seconds()
    # Free the node's GPU for the next launch, and time those tasks' hand-off too.
    client.delete(f"{base}/{instance_id}").raise_for_status()
    wait_for(
        lambda: client.get(f"{base}/{instance_id}").json()["state"] == "deleted",
        timeout=60,
        what="deleted",
        interval=0.05,
    )
    return {
        "total_s": total,
        "accept_ms": (accepted - started) * 1000,
        "app_start_s": app_start,
        "platform_s": total - app_start,
    }


def main() -> int:
    args = parse_args()
    with portal_with_agent(
        args, "gpuaas-bench-runtime-", seed, note=f"; {args.launches} launch(es) of JupyterLab"
    ) as (server, data, _):
        from apps.runtime.models import AgentTask

        form = {
            "grant_type": "client_credentials",
            "client_id": data["client_id"],
            "client_secret": data["client_secret"],
        }
        access = httpx.post(
            f"{server.url}/api/v1/auth/token",
            content=urlencode(form),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ).json()["access_token"]
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {access}"}, timeout=30
        ) as client:
            runs = [launch_once(client, data) for _ in range(args.launches)]
        fetch = [
            (t.claimed_at - t.created_at).total_seconds() * 1000
            for t in AgentTask.objects.exclude(claimed_at=None)
        ]
        print()
        print("Launch to running, JupyterLab through the agent (process executor):")
        print()
        print_table(
            ["launch", "API accept ms", "app start s", "platform overhead s", "total s"],
            [
                [
                    i + 1,
                    f"{r['accept_ms']:.0f}",
                    f"{r['app_start_s']:.2f}",
                    f"{r['platform_s']:.2f}",
                    f"{r['total_s']:.2f}",
                ]
                for i, r in enumerate(runs)
            ],
        )
        print()
        print(
            f"median: total {statistics.median(r['total_s'] for r in runs):.2f} s = app start "
            f"{statistics.median(r['app_start_s'] for r in runs):.2f} s + platform "
            f"{statistics.median(r['platform_s'] for r in runs):.2f} s"
        )
        print(
            f"agent task fetch latency over {len(fetch)} tasks: p50 {percentile(fetch, 50):.0f} ms, "
            f"p95 {percentile(fetch, 95):.0f} ms, max {max(fetch):.0f} ms"
        )
        print(f"# load average after: {load_average()}")
        from django.db import connections

        connections.close_all()
        return 0


if __name__ == "__main__":
    sys.exit(main())
