"""Runs an instance's ``process`` variant as a local process: the embedded
default's executor, for nodes (and laptops) without a container engine.

Each workload gets its own process group (so stopping it reaches its helpers)
and its own session (so it outlives the agent: workloads survive agent
restarts, and a restarted agent adopts them again from its state directory).
Per instance the state directory holds ``workload.json`` (pid and start time,
never a secret), ``output.log`` (the workload's own output) and ``work/``, its
working and home directory. Workloads run in a sandbox (``sandbox.py``) that hides
the platform from them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import httpx

from node_agent.executors.base import OUTPUT, TaskFailed
from node_agent.executors.firewall import Firewall
from node_agent.executors.ports import free_ports, url_host
from node_agent.executors.sandbox import Sandbox
from node_agent.executors.templates import references, resolve_all

READY_TIMEOUT_SECONDS = 90.0
STOP_GRACE_SECONDS = 10.0
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
RECORD = "workload.json"


class ProcessExecutor:
    name = "process"

    def __init__(
        self,
        state_dir: Path,
        *,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        stop_grace: float = STOP_GRACE_SECONDS,
        firewall: Firewall | None = None,
    ):
        self.root = Path(state_dir) / "instances"
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.sandbox = Sandbox(state_dir)
        self.firewall = firewall or Firewall()
        # Workloads this agent started; the agent must reap them (``Popen.poll``) or
        # dead ones linger as zombies. Adopted workloads are known by their record only.
        self._children: dict[str, subprocess.Popen] = {}

    def start(
        self, spec: dict, secrets: dict[str, str], address: str, proxies: Sequence[str] = ()
    ) -> list[dict]:
        process = spec.get("process")
        if process is None:
            raise TaskFailed(
                f"this node's agent has no container engine, and this {spec['execution']} app "
                "has no variant that runs as a local process"
            )
        instance_id = _instance_id(spec)
        self._terminate(instance_id)  # a start replaces whatever still runs (a restart after a failure)
        ports = free_ports([endpoint["name"] for endpoint in spec["endpoints"]], address)
        values = references(ports, secrets, address)
        command = resolve_all(process["command"], values)
        env = resolve_all(process.get("env", {}), values)
        directory = self._directory(instance_id)
        self.firewall.admit_only(instance_id, address, ports.values(), proxies)
        try:
            popen = _spawn(directory, self.sandbox, command, env)
            self._children[instance_id] = popen
            _write_record(directory, {"pid": popen.pid, "started": _start_time(popen.pid)})
            self._wait_ready(
                popen,
                command[0],
                address,
                next(iter(ports.values())),
                process["ready_path"],
                secrets.get("token"),
            )
        except TaskFailed:
            self._terminate(instance_id)
            raise
        return [{"name": name, "host": address, "port": port} for name, port in ports.items()]

    def stop(self, spec: dict) -> None:
        self._terminate(_instance_id(spec))

    def remove(self, spec: dict) -> None:
        instance_id = _instance_id(spec)
        self._terminate(instance_id)
        shutil.rmtree(self.root / instance_id, ignore_errors=True)

    def running(self) -> list[str]:
        for popen in list(self._children.values()):  # the heartbeat thread asks while tasks run
            popen.poll()
        return sorted(path.name for path in self.root.iterdir() if _alive(_read_record(path)))

    def outputs(self) -> dict[str, Path]:
        return {path.name: path / OUTPUT for path in self.root.iterdir() if (path / OUTPUT).is_file()}

    def _directory(self, instance_id: str) -> Path:
        directory = self.root / instance_id
        (directory / "work").mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        return directory

    def _wait_ready(
        self,
        popen: subprocess.Popen,
        program: str,
        address: str,
        port: int,
        ready_path: str,
        token: str | None,
    ) -> None:
        url = f"http://{url_host(address)}:{port}{ready_path}"
        # The app's own token (secret ``token``) goes in the header the platform's
        # auth bridge will send, so "ready" also means "accepts the bridge".
        headers = {"Authorization": f"token {token}"} if token else {}
        deadline = time.monotonic() + self.ready_timeout
        # One client for the whole wait: each new one loads the CA bundle, about 24 ms of
        # CPU, four times a second while the node starts its app.
        with httpx.Client(headers=headers, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if popen.poll() is not None:
                    raise TaskFailed(f"{program} exited with code {popen.returncode} before it was ready")
                if _answers(client, url, bool(token)):
                    return
                time.sleep(0.25)
        raise TaskFailed(
            f"{program} was not ready after {self.ready_timeout:g} s "
            f"({ready_path} on port {port} did not answer)"
        )

    def _terminate(self, instance_id: str) -> None:
        """SIGTERM the workload's group, SIGKILL it after the grace period; returns once it is gone."""
        popen = self._children.pop(instance_id, None)
        if popen is not None:
            popen.poll()  # collect it if it already exited
        record = _read_record(self.root / instance_id)
        if _alive(record):
            _signal_group(record["pid"], signal.SIGTERM)
            if not _wait_gone(record, popen, self.stop_grace):
                _signal_group(record["pid"], signal.SIGKILL)
                _wait_gone(record, popen, 5.0)
            # Helpers the leader left behind in its group go too (the group id stays
            # reserved while any member lives, so this cannot reach another group).
            _signal_group(record["pid"], signal.SIGKILL)
        (self.root / instance_id / RECORD).unlink(missing_ok=True)
        self.firewall.close(instance_id)


def _instance_id(spec: dict) -> str:
    """The instance id names a directory, so it must be exactly a UUID."""
    try:
        return str(uuid.UUID(spec["instance_id"]))
    except (KeyError, ValueError, TypeError, AttributeError):
        raise TaskFailed("the task has no valid instance id") from None


def _environment(home: Path, env: dict[str, str]) -> dict[str, str]:
    """Only what the workload needs: the agent's own environment stays out.
    The interpreter's bin directory comes first, so a virtualenv's tools are found."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{SYSTEM_PATH}"
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", **env}


def _spawn(directory: Path, sandbox: Sandbox, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    work = directory / "work"
    environment = _environment(work, env)
    # Looked up here: inside the sandbox a missing program is only an exit code.
    if shutil.which(command[0], path=environment["PATH"]) is None:
        raise TaskFailed(f"cannot run {command[0]}: no such program on this node")
    sandbox.give(work)
    with open(directory / OUTPUT, "ab") as output:  # the child keeps its own descriptor
        try:
            return subprocess.Popen(
                sandbox.command(command, work),
                cwd=work,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise TaskFailed(f"cannot run {command[0]}: {exc.strerror}") from None


def _answers(client: httpx.Client, url: str, with_token: bool) -> bool:
    try:
        status = client.get(url).status_code
    except httpx.TransportError:
        return False
    # Below 500 it serves; but refusing the token it was started with is not ready.
    return status < 500 and not (with_token and status in (401, 403))


def _write_record(directory: Path, record: dict) -> None:
    temporary = directory / f"{RECORD}.tmp"
    temporary.write_text(json.dumps(record))
    temporary.replace(directory / RECORD)


def _read_record(directory: Path) -> dict | None:
    try:
        return json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22),
    which tells a recorded pid from a later process that reused the number."""
    stat = _stat(pid)
    return int(stat[19]) if stat else None


def _alive(record: dict | None) -> bool:
    if not record:
        return False
    stat = _stat(record["pid"])
    # A zombie has exited; only its parent has not collected it yet.
    return bool(stat) and stat[0] not in ("Z", "X") and int(stat[19]) == record["started"]


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 (state) on: the command name before it may hold spaces."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _wait_gone(record: dict, popen: subprocess.Popen | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen is not None:
            popen.poll()
        if not _alive(record):
            return True
        time.sleep(0.1)
    return False


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)  # started with its own session, so its group id is its pid
