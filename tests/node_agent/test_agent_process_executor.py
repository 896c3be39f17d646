"""The process executor with real processes: ports and secrets resolved, a
minimal environment, readiness probed with the app token, adoption by a
restarted agent, and the ways a start fails."""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from node_agent.executors.base import TaskFailed
from node_agent.executors.process import ProcessExecutor
from tests.support.specs import IID, process_spec

# Records its environment, then serves HTTP, answering 200 only to the token it was given.
SERVER = """
import http.server, json, os, sys
json.dump(dict(os.environ), open("env.json", "w"))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.headers.get("Authorization") == "token " + os.environ["APP_TOKEN"]
        self.send_response(200 if ok else 403)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
"""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # it exited while we looked
        return b""


@pytest.fixture
def executor(tmp_path):
    executor = ProcessExecutor(tmp_path, ready_timeout=20, stop_grace=5)
    yield executor
    executor.remove({"instance_id": IID})


def test_start_resolves_ports_and_secrets_and_waits_until_ready(executor, tmp_path):
    spec = process_spec(
        ["python", "-c", SERVER, "{{ node.address }}", "{{ port.web }}"], {"APP_TOKEN": "{{ secret.token }}"}
    )
    [endpoint] = executor.start(spec, {"token": "app-token-1"}, "127.0.0.1")
    assert endpoint["name"] == "web"
    assert endpoint["host"] == "127.0.0.1"
    work = tmp_path / "instances" / IID / "work"
    environment = json.loads((work / "env.json").read_text())
    assert environment == {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "LANG": "C.UTF-8",
        "APP_TOKEN": "app-token-1",
        "PWD": str(work),  # set by the sandbox
    }
    assert executor.running() == [IID]
    record = json.loads((tmp_path / "instances" / IID / "workload.json").read_text())
    assert "app-token-1" not in json.dumps(record)

    restarted = ProcessExecutor(tmp_path)  # a new agent on the same state directory adopts it
    assert restarted.running() == [IID]
    restarted.stop({"instance_id": IID})
    assert not alive(record["pid"])
    assert restarted.running() == []
    assert executor.running() == []
    assert (tmp_path / "instances" / IID / "work").exists()  # stop keeps what it wrote

    executor.start(spec, {"token": "app-token-2"}, "127.0.0.1")
    executor.remove({"instance_id": IID})
    assert not (tmp_path / "instances" / IID).exists()


def test_a_process_that_exits_before_it_is_ready_fails_the_start(executor):
    with pytest.raises(TaskFailed, match="python exited with code 3 before it was ready"):
        executor.start(process_spec(["python", "-c", "raise SystemExit(3)"]), {"token": "t"}, "127.0.0.1")
    assert executor.running() == []


def test_a_process_that_never_answers_is_stopped(executor, tmp_path):
    executor.ready_timeout = 1
    marker = f"never-answers-{uuid.uuid4().hex}"
    silent = f"import time; time.sleep(60)  # {marker}"
    with pytest.raises(TaskFailed, match=r"python was not ready after 1 s \(/w/ready on port \d+ did not"):
        executor.start(process_spec(["python", "-c", silent]), {"token": "t"}, "127.0.0.1")
    # Its pid inside the sandbox means nothing out here: look for its command line.
    assert not [proc for proc in Path("/proc").glob("[0-9]*/cmdline") if marker.encode() in _read_bytes(proc)]
    assert executor.running() == []


def test_a_token_the_app_refuses_is_not_ready(executor):
    executor.ready_timeout = 2
    spec = process_spec(
        ["python", "-c", SERVER, "{{ node.address }}", "{{ port.web }}"], {"APP_TOKEN": "expected"}
    )
    with pytest.raises(TaskFailed, match="not ready after 2 s"):
        executor.start(spec, {"token": "another"}, "127.0.0.1")


def test_what_cannot_run_here_is_refused_with_a_reason(executor):
    compose = {"instance_id": IID, "name": f"gpuaas-{IID}", "execution": "compose", "endpoints": []}
    with pytest.raises(TaskFailed, match="this node's agent has no container engine"):
        executor.start(compose, {}, "127.0.0.1")
    with pytest.raises(TaskFailed, match="cannot run no-such-program: no such program"):
        executor.start(process_spec(["no-such-program"]), {"token": "t"}, "127.0.0.1")
    with pytest.raises(TaskFailed, match="refers to secret 'token'"):
        executor.start(process_spec(["python", "{{ secret.token }}"]), {}, "127.0.0.1")
    # An address that is not this machine's (the platform saw the agent through a NAT).
    with pytest.raises(
        TaskFailed, match=re.escape("cannot publish apps on 203.0.113.9, the address the platform sees")
    ):
        executor.start(process_spec(["python", "-c", SERVER]), {"token": "t"}, "203.0.113.9")
    with pytest.raises(TaskFailed, match="no valid instance id"):
        executor.stop({"instance_id": "../../etc"})


def test_the_app_is_published_on_the_nodes_address_and_nowhere_else(executor):
    """The platform proxy connects to the address the node's agent enrolled from; the
    app listens there, and is not on the node's other addresses."""
    spec = process_spec(
        ["python", "-c", SERVER, "{{ node.address }}", "{{ port.web }}"], {"APP_TOKEN": "{{ secret.token }}"}
    )
    [endpoint] = executor.start(spec, {"token": "app-token-3"}, "127.0.0.2")
    assert endpoint["host"] == "127.0.0.2"
    headers = {"Authorization": "token app-token-3"}
    assert httpx.get(f"http://127.0.0.2:{endpoint['port']}/", headers=headers).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{endpoint['port']}/", headers=headers)
