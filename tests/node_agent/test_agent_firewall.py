"""On a node only the platform proxy reaches an app's port (decision 0037): the process
executor, run inside a network namespace that stands in for the node, starts a real
workload on the node's address; a connection from the proxy's address reaches it,
one from another address of the same network does not, and once the app stops the
rule is gone. The namespace is joined to this host by a veth pair whose host end
holds both the proxy's address and the stranger's."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent.executors.base import TaskFailed
from node_agent.executors.firewall import CHAIN, TABLE, Firewall
from tests.support.specs import IID, process_spec

ROOT = Path(__file__).resolve().parents[2]
SUBNET = f"10.213.{os.getpid() % 250}"
NODE, PROXY, STRANGER = f"{SUBNET}.2", f"{SUBNET}.1", f"{SUBNET}.3"

# The executor as the agent runs it, inside the namespace: ``start`` or ``stop`` one spec.
EXECUTOR = """
import json, sys
from pathlib import Path
from node_agent.executors.process import ProcessExecutor
state, action, spec = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
executor = ProcessExecutor(state, ready_timeout=30, stop_grace=2)
if action == "start":
    print(json.dumps(executor.start(spec, {"token": "t" * 32}, sys.argv[4], json.loads(sys.argv[5]))))
else:
    executor.stop(spec)
"""


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture
def node_namespace():
    """The namespace's name, set up as described above; skipped where this kernel or
    machine cannot give one with nftables."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        pytest.skip("needs root, iproute2 and nftables (apt-get install nftables)")
    name, host_end, node_end = f"gpuaas-fw-{os.getpid()}", f"gfw{os.getpid()}h", f"gfw{os.getpid()}n"
    if _run("ip", "netns", "add", name, check=False).returncode:
        pytest.skip("network namespaces cannot be made here")
    try:
        probe = _run("ip", "netns", "exec", name, "nft", "add", "table", "inet", "probe", check=False)
        if probe.returncode:
            pytest.skip(f"the kernel refuses nftables here: {probe.stderr.strip()}")
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end)
        _run("ip", "link", "set", node_end, "netns", name)
        for address in (PROXY, STRANGER):
            _run("ip", "address", "add", f"{address}/24", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        inside = ("ip", "netns", "exec", name, "ip")
        _run(*inside, "address", "add", f"{NODE}/24", "dev", node_end)
        _run(*inside, "link", "set", node_end, "up")
        _run(*inside, "link", "set", "lo", "up")
        yield name
    finally:
        _run("ip", "link", "delete", host_end, check=False)  # its peer goes with it
        _run("ip", "netns", "delete", name, check=False)


def executor_in(namespace: str, state: Path, action: str, *args: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", EXECUTOR, str(state), action, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def reaches(source: str, port: int) -> bool:
    try:
        socket.create_connection((NODE, port), timeout=2, source_address=(source, 0)).close()
        return True
    except OSError:
        return False


def test_only_the_proxy_reaches_an_apps_port_until_the_app_stops(node_namespace, tmp_path):
    spec = process_spec(
        [sys.executable, "-m", "http.server", "{{ port.web }}", "--bind", "{{ node.address }}"]
    )
    [endpoint] = json.loads(
        executor_in(node_namespace, tmp_path, "start", json.dumps(spec), NODE, json.dumps([PROXY]))
    )
    try:
        assert endpoint["host"] == NODE
        assert reaches(PROXY, endpoint["port"])
        assert not reaches(STRANGER, endpoint["port"])
    finally:
        executor_in(node_namespace, tmp_path, "stop", json.dumps(spec))
    rules = _run(
        "ip", "netns", "exec", node_namespace, "nft", "--json", "list", "chain", "inet", TABLE, CHAIN
    )
    assert not [item for item in json.loads(rules.stdout)["nftables"] if "rule" in item]


def test_the_rule_holds_the_port_for_the_stranger_and_the_node_itself_still_reaches_it(node_namespace):
    """The rule alone, around a listener of the test's (the app stand-in): the node's
    own processes (over ``lo``) are not the stranger."""
    firewall = Firewall(nft=["ip", "netns", "exec", node_namespace, "nft"])
    listener = subprocess.Popen(
        ["ip", "netns", "exec", node_namespace, sys.executable, "-m", "http.server", "0", "--bind", NODE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = int(listener.stdout.readline().split(" port ")[1].split()[0])
        assert reaches(STRANGER, port)
        firewall.admit_only(IID, NODE, [port], [f"{PROXY}/32"])
        assert not reaches(STRANGER, port)
        assert reaches(PROXY, port)
        local = _run(
            "ip",
            "netns",
            "exec",
            node_namespace,
            sys.executable,
            "-c",
            f"import socket; socket.create_connection(({NODE!r}, {port}), timeout=2)",
            check=False,
        )
        assert local.returncode == 0, local.stderr
        firewall.close(IID)
        assert reaches(STRANGER, port)
    finally:
        listener.kill()
        listener.wait(timeout=10)


def test_a_node_address_without_proxy_addresses_is_refused():
    """No proxy named: the app would be open to all, so its start fails before it runs
    (no rule is made, so this needs no namespace)."""
    with pytest.raises(TaskFailed, match="GPUAAS_PROXY_SOURCE_ADDRESSES"):
        Firewall().admit_only(IID, "192.0.2.10", [8888], ["2001:db8::1"])
