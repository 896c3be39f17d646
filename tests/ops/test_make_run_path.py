"""The README's ``make run`` path, as a newcomer takes it: ``migrate``,
``bootstrap_demo`` and ``serve`` on the embedded default (SQLite, the in-process
worker, the local node agent), then over HTTP as ``demo``: sign in, allocate an
h100-1x, log in to it with ssh (the local agent's own sshd), launch JupyterLab on it
and see it running, a command in its web terminal, the usage page, the billing CSV.
On the way, what the terminal shows: one human line a step with the sign-in line
last, the JSON log lines in ``var/log/`` instead, and Ctrl-C stopping everything
(the local agent too) and saying so. Runs in the SQLite part of ``make test``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import httpx

from tests.support.processes import free_port, wait_for
from tests.support.ssh import key_pair, ssh
from tests.support.terminal import Terminal

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")


def test_a_newcomer_allocates_launches_jupyterlab_and_sees_the_bill(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GPUAAS_") and key not in PRODUCTION
    }
    env.update(GPUAAS_VAR_DIR=str(tmp_path / "var"), GPUAAS_SIMULATED_STEP_SECONDS="0.2")
    for command in (["migrate", "--noinput", "-v", "0"], ["bootstrap_demo"]):
        done = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True
        )
        assert b'{"time"' not in done.stdout + done.stderr  # log lines go to the file
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=base, timeout=30, trust_env=False)
    instance_url = None
    try:
        wait_for(lambda: _answers(client, "/healthz"), timeout=60, what="serve answering")
        said = wait_for(lambda: _said(tmp_path, "Ready:"), timeout=10, what="the sign-in line")
        assert said[-1] == (
            f"Ready: open {base}/ and sign in as demo / demo (operators: admin / admin). Ctrl-C stops."
        )
        assert "Local node agent started for node gpu1-001.demo" in said
        assert f"Logs go to {tmp_path / 'var' / 'log' / 'gpuaas.log'}" in said
        assert not [line for line in said if line.startswith("{")], said  # no JSON in the terminal
        client.get("/accounts/login/")
        signed_in = client.post(
            "/accounts/login/",
            data={"username": "demo", "password": "demo", "csrfmiddlewaretoken": client.cookies["csrftoken"]},
            headers={"Referer": f"{base}/accounts/login/"},
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        csrf = {"X-CSRFToken": client.cookies["csrftoken"], "Referer": f"{base}/"}
        [project] = client.get("/api/v1/projects").json()["results"]

        allocated = client.post(
            "/api/baremetal-manager/allocate",
            json={"flavor": "h100-1x", "os_image": "ubuntu-22.04", "project_id": "demo", "tenant_id": "demo"},
            headers=csrf,
        )
        assert allocated.status_code == 202, allocated.text
        status_url = f"/api/baremetal-manager/{allocated.json()['node_id']}/status"
        wait_for(
            lambda: state(client, status_url) == "ACTIVE",
            timeout=120,
            what="the allocation ACTIVE",
        )
        allocation_url = f"/api/v1/projects/{project['id']}/allocations/{allocated.json()['allocation_id']}"
        access = wait_for(
            lambda: _reported(client, f"{allocation_url}/access"), timeout=60, what="the local node's sshd"
        )
        key = key_pair(tmp_path, "newcomer")
        added = client.post(
            f"{allocation_url}/authorized-keys", json={"public_key": key.public_key}, headers=csrf
        )
        assert added.status_code == 201, added.text
        wait_for(
            lambda: ssh(access, key, "echo hello", tmp_path / "known_hosts").stdout == "hello\n",
            timeout=10,
            what="an ssh login to the local node",
        )

        launched = client.post(
            f"/api/v1/projects/{project['id']}/app-instances",
            json={"app": "jupyterlab", "allocation_id": allocated.json()["allocation_id"]},
            headers=csrf,
        )
        assert launched.status_code == 202, launched.text
        instance_url = f"/api/v1/projects/{project['id']}/app-instances/{launched.json()['instance_id']}"
        wait_for(
            lambda: state(client, instance_url) == "running",
            timeout=180,
            what="JupyterLab running",
        )

        # The allocation's web terminal: a shell through the local agent (its own user).
        terminal = Terminal(
            SimpleNamespace(url=base), allocated.json()["allocation_id"], client.cookies["sessionid"]
        )
        try:
            terminal.connect(cols=100, rows=30)
            terminal.type("echo from-the-node-$((6*7)); tput cols\r")
            terminal.read_until(lambda out: b"from-the-node-42\r\n100\r\n" in out)
        finally:
            terminal.close()

        usage = client.get(f"/tenants/{project['tenant_id']}/usage/")
        assert usage.status_code == 200
        assert "Usage and charges" in usage.text
        period = datetime.now(UTC).strftime("%Y-%m")
        bill = client.get("/api/metering/export/csv", params={"tenant_id": "demo", "period": period})
        assert bill.status_code == 200, bill.text
        assert bill.headers["content-type"].startswith("text/csv"), bill.text
        assert "demo,demo," in bill.text
        assert "node_hours,h100-1x" in bill.text
        client.delete(instance_url, headers=csrf)
        wait_for(lambda: state(client, instance_url) == "deleted", timeout=60, what="JupyterLab deleted")
        instance_url = None

        # The JSON log lines went to var/log/, this request's among them.
        logged = [
            json.loads(line) for line in (tmp_path / "var" / "log" / "gpuaas.log").read_text().splitlines()
        ]
        assert any(line.get("path") == "/api/metering/export/csv" for line in logged)

        # Ctrl-C in the terminal (SIGINT to its process group): everything stops, and says so.
        agents = _local_agents(port)
        assert agents, "the local node agent runs beside serve"
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(timeout=10) == 0  # a hang detector, not a benchmark: it stops in about 1-2 s
        assert _said(tmp_path, "Stopped:")[-1] == "Stopped: the portal, its worker and the local node agent."
        assert not [pid for pid in agents if Path(f"/proc/{pid}").exists()], "the local agent outlived serve"
    finally:
        if instance_url is not None:  # its JupyterLab outlives the agent otherwise
            client.delete(instance_url, headers=csrf)
            wait_for(
                lambda: state(client, instance_url) == "deleted",
                timeout=60,
                what="JupyterLab deleted",
            )
        client.close()
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(timeout=30)
        log.close()


def _said(tmp_path: Path, prefix: str) -> list[str] | None:
    """What serve has printed up to its first line starting with ``prefix``, once it has."""
    lines = (tmp_path / "serve.log").read_text().splitlines()
    at = next((n for n, line in enumerate(lines) if line.startswith(prefix)), None)
    return None if at is None else lines[: at + 1]


def _local_agents(port: int) -> list[int]:
    """The pids of the local node agents serving the portal on ``port``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run_node_agent" in command and f"http://127.0.0.1:{port}".encode() in command:
            pids.append(int(proc.name))
    return pids


def state(client: httpx.Client, url: str) -> str:
    return client.get(url).json()["state"]


def _reported(client: httpx.Client, url: str) -> dict | None:
    access = client.get(url).json()
    return access if access["host"] else None


def _answers(client: httpx.Client, path: str) -> bool:
    try:
        return client.get(path).status_code == 200
    except httpx.TransportError:
        return False
