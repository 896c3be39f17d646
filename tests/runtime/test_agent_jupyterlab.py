"""JupyterLab for real: the platform API, the portal under uvicorn, a node agent
process and a JupyterLab server run by the agent's process executor.

Nothing is simulated on the runtime path: the agent enrolls with a bootstrap
token, long-polls its tasks, picks a port, fetches the app token, starts
``jupyter-lab`` and reports; heartbeats carry what still runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from apps.runtime import agents, selectors
from apps.runtime.models import AgentTask, AppInstance, Endpoint
from tests.support.instances import START_TIMEOUT, PlatformApi
from tests.support.processes import wait_for

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def platform(api, allocator, project, jupyterlab):
    api.force_login(allocator)
    return PlatformApi(api, project)


def jupyter_status(instance_id, token: str | None = None) -> int:
    endpoint = Endpoint.objects.get(instance_id=instance_id, name="web")
    headers = {"Authorization": f"token {token}"} if token else {}
    url = f"http://{endpoint.host}:{endpoint.port}/w/{instance_id}/web/api/status"
    return httpx.get(url, headers=headers, timeout=10).status_code


def workload(agent, instance_id) -> dict:
    """The agent's record of the instance's process (pid and start time)."""
    return json.loads((agent.state_dir / "instances" / instance_id / "workload.json").read_text())


def process_exists(pid: int) -> bool:
    """Alive, not a zombie waiting for its parent to collect it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_jupyterlab_lifecycle_through_a_real_agent(platform, active_allocation, node_agent):
    began = time.monotonic()
    instance_id = platform.launch(active_allocation)
    platform.wait_state(instance_id, "running", timeout=START_TIMEOUT)
    print(f"JupyterLab running {time.monotonic() - began:.1f} s after launch")  # shown with -s
    token = selectors.runtime_secret(AppInstance.objects.get(pk=instance_id), "token")
    endpoint = Endpoint.objects.get(instance_id=instance_id, name="web")
    assert endpoint.host == "127.0.0.1"
    assert endpoint.port
    assert jupyter_status(instance_id, token) == 200
    assert jupyter_status(instance_id) == 403

    pid = workload(node_agent, instance_id)["pid"]
    platform.act(instance_id, "stop")
    platform.wait_state(instance_id, "stopped")
    assert not process_exists(pid)

    platform.act(instance_id, "start")
    platform.wait_state(instance_id, "running", timeout=START_TIMEOUT)
    # Started again with a new token: whoever learned the old one inside it is locked out.
    renewed = selectors.runtime_secret(AppInstance.objects.get(pk=instance_id), "token")
    assert renewed != token
    assert jupyter_status(instance_id, token) == 403
    assert jupyter_status(instance_id, renewed) == 200
    pid = workload(node_agent, instance_id)["pid"]

    platform.act(instance_id, "delete")
    platform.wait_state(instance_id, "deleted")
    assert not process_exists(pid)
    assert not (node_agent.state_dir / "instances" / instance_id).exists()

    timeline = [(event["from_state"], event["to_state"]) for event in platform.events(instance_id)]
    assert timeline == [
        ("", "requested"),
        ("requested", "starting"),
        ("starting", "running"),
        ("running", "stopping"),
        ("stopping", "stopped"),
        ("stopped", "starting"),
        ("starting", "running"),
        ("running", "decommissioning"),
        ("decommissioning", "deleted"),
    ]
    assert_token_kept_secret(token, platform, node_agent, instance_id)
    assert_token_kept_secret(renewed, platform, node_agent, instance_id)


def test_workloads_outlive_the_agent_and_dead_ones_are_reported(
    platform, active_allocation, node_agent, settings
):
    instance_id = platform.launch(active_allocation)
    platform.wait_state(instance_id, "running", timeout=START_TIMEOUT)
    token = selectors.runtime_secret(AppInstance.objects.get(pk=instance_id), "token")
    hostname = active_allocation.node.hostname

    assert node_agent.terminate() == 0  # SIGTERM: a clean exit that stops no workload
    assert jupyter_status(instance_id, token) == 200
    node_agent.start()

    node_agent.kill()
    settings.AGENT_OFFLINE_AFTER_SECONDS = 1
    wait_for(lambda: agents.mark_silent_nodes_offline() == 1, timeout=10, what="the node going offline")
    platform.wait_state(instance_id, "failed")
    assert f"node agent on {hostname} offline" in AppInstance.objects.get(pk=instance_id).state_reason
    assert jupyter_status(instance_id, token) == 200  # the workload did not notice

    node_agent.start()  # with the saved credential (its spent bootstrap token is still in its environment)
    platform.wait_state(instance_id, "running")
    assert [e["kind"] for e in platform.events(instance_id)][-2:] == ["node_offline", "node_online"]

    os.killpg(workload(node_agent, instance_id)["pid"], signal.SIGKILL)
    platform.wait_state(instance_id, "failed")
    assert "no longer running" in AppInstance.objects.get(pk=instance_id).state_reason
    assert_token_kept_secret(token, platform, node_agent, instance_id)


def assert_token_kept_secret(token: str, platform: PlatformApi, agent, instance_id) -> None:
    assert token
    assert len(token) >= 20
    assert not any(token.encode() in body for body in platform.answers)
    assert token not in agent.log()
    specs = [json.dumps(task.spec) for task in AgentTask.objects.filter(instance_id=instance_id)]
    assert specs
    assert not any(token in spec for spec in specs)


# Run in a JupyterLab kernel: what tenant code tries against the platform on its host.
ATTEMPTS = """
import json, os, sys
tried = {"uid": os.getuid()}
for path in json.loads(TARGETS):
    try:
        with open(path, "rb") as found:
            found.read(1)
        tried[path] = "read"
    except OSError as exc:
        tried[path] = type(exc).__name__
try:
    with open(os.path.join(sys.prefix, "planted-by-a-kernel"), "w") as planted:
        planted.write("x")
    tried["venv"] = "written"
except OSError as exc:
    tried["venv"] = type(exc).__name__
print(json.dumps(tried))
"""


def test_a_kernel_cannot_read_the_platforms_secrets_or_change_its_virtualenv(
    platform, active_allocation, node_agent, settings
):
    planted_in_venv = Path(sys.prefix) / "planted-by-a-kernel"
    planted_in_venv.unlink(missing_ok=True)  # what a run without the sandbox left
    # The embedded default's var/ holds these (generated secrets, the SQLite database).
    settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
    planted = {name: settings.VAR_DIR / name for name in ("secret_key", "encryption_key", "gpuaas.sqlite3")}
    for path in planted.values():
        path.write_text("platform-secret")
    repository_files = [
        Path(__file__).resolve().parents[2] / "manage.py",
        node_agent.state_dir / "credential.json",
    ]
    targets = [str(path) for path in [*planted.values(), *repository_files]]

    instance_id = platform.launch(active_allocation)
    platform.wait_state(instance_id, "running", timeout=START_TIMEOUT)
    token = selectors.runtime_secret(AppInstance.objects.get(pk=instance_id), "token")
    tried = json.loads(
        run_in_kernel(instance_id, token, f"TARGETS = {json.dumps(json.dumps(targets))}\n" + ATTEMPTS)
    )

    assert not [path for path in targets if tried[path] == "read"], tried
    assert tried["venv"] != "written", tried
    assert not planted_in_venv.exists()
    if os.geteuid() == 0:
        assert tried["uid"] != 0  # and not as root: as the workload user


def run_in_kernel(instance_id: str, token: str, code: str) -> str:
    """Start a kernel through Jupyter's REST API, run ``code`` over its WebSocket
    (Jupyter's JSON message protocol) and answer what it printed."""
    endpoint = Endpoint.objects.get(instance_id=instance_id, name="web")
    base = f"{endpoint.host}:{endpoint.port}/w/{instance_id}/web/api"
    headers = {"Authorization": f"token {token}"}
    kernel = httpx.post(f"http://{base}/kernels", headers=headers, json={"name": "python3"}, timeout=60)
    assert kernel.status_code == 201, kernel.text

    async def execute() -> str:
        message_id = uuid.uuid4().hex
        request = {
            "header": {
                "msg_id": message_id,
                "msg_type": "execute_request",
                "username": "test",
                "session": uuid.uuid4().hex,
                "version": "5.3",
                "date": "",
            },
            "parent_header": {},
            "metadata": {},
            "content": {"code": code, "silent": False, "store_history": False, "allow_stdin": False},
            "channel": "shell",
        }
        url = f"ws://{base}/kernels/{kernel.json()['id']}/channels"
        output = []
        async with connect(url, additional_headers=headers, open_timeout=60) as socket:
            await socket.send(json.dumps(request))
            while True:
                message = json.loads(await asyncio.wait_for(socket.recv(), timeout=60))
                if message.get("parent_header", {}).get("msg_id") != message_id:
                    continue
                if message["msg_type"] == "stream":
                    output.append(message["content"]["text"])
                elif message["msg_type"] == "error":
                    raise AssertionError("\n".join(message["content"]["traceback"]))
                elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                    # Last on the output channel: the reply (another channel) may come first.
                    return "".join(output)

    return asyncio.run(execute())
