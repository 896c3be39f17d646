"""Runs an instance's container (``docker run``) or curated Compose project
(``docker compose``) on the node's container engine.

The platform renders only digest-pinned images, no host paths and no privileged
flags; the agent checks that again before it runs anything (``validate``), since
it is the last line before root on the node. Endpoints are published on the
loopback interface only: the platform proxy is the way in.

Secret values never appear on a command line (visible in the process list) nor
in the Compose document: a container gets them through a 0600 env file removed
right after ``docker run``; a Compose project through variables in the Compose
CLI's environment that the document refers to as ``${GPUAAS_SECRET_<NAME>}``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from node_agent.executors.base import OUTPUT, TaskFailed
from node_agent.executors.firewall import Firewall
from node_agent.executors.ports import free_ports, url_host
from node_agent.executors.templates import REFERENCE, references, resolve, resolve_all

INSTANCE_LABEL = "gpuaas.instance"
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMMAND_TIMEOUT_SECONDS = 600.0  # image pulls of multi-GB GPU images take minutes
DIGEST_PINNED = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PUBLISHED_PORT = re.compile(r"^\{\{\s*node\.address\s*\}\}:\{\{\s*port\.[A-Za-z0-9_-]+\s*\}\}:\d+$")
CONTAINER_FIELDS = {"image", "args", "env", "gpus"}
SERVICE_FIELDS = {
    "image",
    "command",
    "environment",
    "labels",
    "restart",
    "read_only",
    "security_opt",
    "cap_drop",
    "ports",
    "deploy",
    "depends_on",
    "volumes",
}
DOCUMENT_FIELDS = {"name", "services", "volumes"}


class DockerExecutor:
    name = "docker"

    def __init__(self, state_dir: Path, docker: str = "docker", firewall: Firewall | None = None):
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.docker = docker
        self.firewall = firewall or Firewall()
        self._followers: dict[str, subprocess.Popen] = {}

    def start(
        self, spec: dict, secrets: dict[str, str], address: str, proxies: Sequence[str] = ()
    ) -> list[dict]:
        validate(spec)
        ports = free_ports([endpoint["name"] for endpoint in spec["endpoints"]], address)
        values = references(ports, secrets, address)
        self.firewall.admit_only(spec["instance_id"], address, ports.values(), proxies)
        try:
            if "compose" in spec:
                self._compose_up(spec, values)
            else:
                self._run(spec, values)
        except TaskFailed:
            self.firewall.close(spec["instance_id"])
            raise
        return [{"name": name, "host": address, "port": port} for name, port in ports.items()]

    def stop(self, spec: dict) -> None:
        if spec["execution"] == "compose":
            self._docker(["compose", "--project-name", spec["name"], "stop"])
        else:
            self._docker(["stop", spec["name"]], missing_ok=True)
        self.firewall.close(spec["instance_id"])

    def remove(self, spec: dict) -> None:
        if spec["execution"] == "compose":
            self._docker(["compose", "--project-name", spec["name"], "down", "--volumes", "--remove-orphans"])
        else:
            self._docker(["rm", "--force", "--volumes", spec["name"]], missing_ok=True)
        self.firewall.close(spec["instance_id"])
        self._unfollow(spec["instance_id"])
        shutil.rmtree(self._output(spec["instance_id"]).parent, ignore_errors=True)

    def running(self) -> list[str]:
        return sorted(self._listed())

    def outputs(self) -> dict[str, Path]:
        """Each running instance's output, as a file its ``docker logs --follow`` (or
        ``docker compose logs --follow``) appends to; a follower that ended (the agent
        restarted, the engine hiccuped) starts again from the file's last write."""
        listed = self._listed()
        for instance_id in set(self._followers) - set(listed):
            self._unfollow(instance_id)
        for instance_id, project in listed.items():
            follower = self._followers.get(instance_id)
            if follower is None or follower.poll() is not None:
                self._followers[instance_id] = self._follow(instance_id, project)
        return {instance_id: self._output(instance_id) for instance_id in listed}

    def _listed(self) -> dict[str, str]:
        """The running instances' ids, each with its Compose project ("" for a container)."""
        listed = self._docker(
            [
                "ps",
                "--filter",
                f"label={INSTANCE_LABEL}",
                "--format",
                f'{{{{.Label "{INSTANCE_LABEL}"}}}} {{{{.Label "{COMPOSE_PROJECT_LABEL}"}}}}',
            ]
        )
        found: dict[str, str] = {}
        for line in listed.splitlines():
            instance_id, _, project = line.strip().partition(" ")
            if instance_id:
                found[instance_id] = found.get(instance_id) or project.strip()
        return found

    def _output(self, instance_id: str) -> Path:
        return self.state_dir / "output" / instance_id / OUTPUT

    def _follow(self, instance_id: str, project: str) -> subprocess.Popen:
        path = self._output(instance_id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        since = []
        if path.exists():  # followed before: only what came after its last line
            since = ["--since", _rfc3339(path.stat().st_mtime_ns)]
        if project:
            command = ["compose", "--project-name", project, "logs", "--follow", "--no-color", *since]
        else:
            command = ["logs", "--follow", *since, f"gpuaas-{instance_id}"]
        with open(path, "ab") as output:
            return subprocess.Popen(
                [self.docker, *command],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _unfollow(self, instance_id: str) -> None:
        follower = self._followers.pop(instance_id, None)
        if follower is not None and follower.poll() is None:
            follower.terminate()
            try:
                follower.wait(timeout=5)
            except subprocess.TimeoutExpired:
                follower.kill()
                follower.wait()

    def _run(self, spec: dict, values: dict[str, dict]) -> None:
        # A start replaces the instance's earlier container (stopped, or failed).
        self._docker(["rm", "--force", "--volumes", spec["name"]], missing_ok=True)
        env_file = self.state_dir / f"{spec['name']}.env"
        secret_env = _secret_env(spec["container"]["env"], values)
        try:
            if secret_env:
                _write_private(env_file, "".join(f"{name}={value}\n" for name, value in secret_env.items()))
            self._docker(run_command(spec, values, env_file if secret_env else None)[1:])
        finally:
            env_file.unlink(missing_ok=True)

    def _compose_up(self, spec: dict, values: dict[str, dict]) -> None:
        document = compose_document(spec, values)
        variables = {_secret_variable(name): value for name, value in values["secret"].items()}
        self._docker(
            compose_up_command(spec)[1:], stdin=json.dumps(document), env={**os.environ, **variables}
        )

    def _docker(
        self, args: list[str], *, missing_ok: bool = False, stdin: str | None = None, env: dict | None = None
    ) -> str:
        feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
        try:
            done = subprocess.run(
                [self.docker, *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_SECONDS,
                check=False,
                **feed,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TaskFailed(f"docker {args[0]} did not complete: {exc}") from None
        if done.returncode and not (missing_ok and "No such container" in done.stderr):
            detail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            raise TaskFailed(f"docker {' '.join(args[:2])} failed: {detail[0]}")
        return done.stdout


# --- what is run: pure functions of the spec, so they are tested without an engine ---


def run_command(spec: dict, values: dict[str, dict], env_file: Path | None = None) -> list[str]:
    """``docker run`` for a single-container spec; env values holding a secret are in ``env_file``."""
    container, ports = spec["container"], values["port"]
    published = url_host(values["node"]["address"])
    command = ["docker", "run", "--detach", "--name", spec["name"]]
    for key, value in spec["labels"].items():
        command += ["--label", f"{key}={value}"]
    if container.get("gpus"):
        command += ["--gpus", str(container["gpus"])]
    for endpoint in spec["endpoints"]:
        command += ["--publish", f"{published}:{ports[endpoint['name']]}:{endpoint['container_port']}"]
    for name, value in container.get("env", {}).items():
        if not _has_secret(value):
            command += ["--env", f"{name}={resolve(value, values)}"]
    if env_file is not None:
        command += ["--env-file", str(env_file)]
    command += ["--security-opt", "no-new-privileges:true", "--restart", "unless-stopped"]
    return [*command, container["image"], *resolve_all(container.get("args", []), values)]


def compose_up_command(spec: dict) -> list[str]:
    """The document goes on stdin, so no rendered file is left on the node."""
    project = spec["compose"]["project"]
    return ["docker", "compose", "--project-name", project, "--file", "-", "up", "--detach"]


def compose_document(spec: dict, values: dict[str, dict]) -> dict:
    """The rendered document with ports filled in and secrets as ``${...}`` variables.
    Compose interpolates ``$`` everywhere, so literal ones are doubled first. A
    published port's address is written as Docker wants it (IPv6 in brackets)."""
    published = {**values, "node": {"address": url_host(values["node"]["address"])}}

    def fill(value, values=values):
        if isinstance(value, str):
            return resolve(
                value.replace("$", "$$"),
                values,
                secret_value=lambda name, _: f"${{{_secret_variable(name)}}}",
            )
        if isinstance(value, list):
            return [fill(item, values) for item in value]
        if isinstance(value, dict):
            return {key: fill(item, published if key == "ports" else values) for key, item in value.items()}
        return value

    return fill(spec["compose"]["document"])


def _secret_env(env: dict[str, str], values: dict[str, dict]) -> dict[str, str]:
    return {name: resolve(value, values) for name, value in env.items() if _has_secret(value)}


def _has_secret(value: str) -> bool:
    return any(namespace == "secret" for namespace, _ in REFERENCE.findall(value))


def _secret_variable(name: str) -> str:
    return "GPUAAS_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


# --- validation -------------------------------------------------------------------


def validate(spec: dict) -> None:
    """Refuse anything the platform would never render: tag-only images, host
    paths, privileged or host-namespace flags, ports published elsewhere than on
    the node's address."""
    if "compose" in spec:
        problems = _document_problems(spec["compose"].get("document", {}))
    elif "container" in spec:
        problems = _container_problems(spec["container"])
    else:
        problems = ["it has neither a container nor a Compose project"]
    if problems:
        raise TaskFailed("refused to run the task: " + "; ".join(problems))


def _container_problems(container: dict) -> list[str]:
    problems = _field_problems("the container", container, CONTAINER_FIELDS)
    problems += _image_problems(container.get("image", ""))
    if any(_has_secret(arg) for arg in container.get("args", [])):
        problems.append("a secret in the container's arguments would show in the node's process list")
    problems += [
        f"{name!r} is not an environment variable name"
        for name in container.get("env", {})
        if not ENV_NAME.match(name)
    ]
    return problems


def _document_problems(document: dict) -> list[str]:
    problems = _field_problems("the Compose document", document, DOCUMENT_FIELDS)
    for name, volume in (document.get("volumes") or {}).items():
        if volume and set(volume) - {"labels"}:
            problems.append(f"volume {name!r} sets a driver or options (only plain named volumes)")
    if not document.get("services"):
        problems.append("the Compose document has no services")
    for name, service in (document.get("services") or {}).items():
        problems += [f"service {name!r}: {problem}" for problem in _service_problems(service)]
    return problems


def _service_problems(service: dict) -> list[str]:
    problems = _field_problems("it", service, SERVICE_FIELDS)
    problems += _image_problems(service.get("image", ""))
    problems += [
        f"publishes {port!r} (only {{{{ node.address }}}}:<agent port>:<container port>)"
        for port in service.get("ports", [])
        if not PUBLISHED_PORT.match(str(port))
    ]
    problems += [problem for volume in service.get("volumes", []) if (problem := _volume_problem(volume))]
    if set(service.get("security_opt", [])) - {"no-new-privileges:true"}:
        problems.append("security_opt may only set no-new-privileges:true")
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    if any(device.get("driver") != "nvidia" for device in devices):
        problems.append("only NVIDIA GPUs may be reserved as devices")
    return problems


def _field_problems(what: str, fields: dict, allowed: set[str]) -> list[str]:
    problems = []
    for field in sorted(set(fields) - allowed):
        if field == "privileged":
            problems.append(f"{what} asks for privileged mode")
        else:
            problems.append(f"{what} sets {field!r}, which the agent does not run")
    return problems


def _image_problems(image: str) -> list[str]:
    if DIGEST_PINNED.match(image):
        return []
    return [f"image {image!r} is not pinned by digest (image@sha256:...)"]


def _volume_problem(volume) -> str | None:
    """Only volumes the engine manages (``name:/path``, an anonymous ``/path``, or
    ``{"type": "volume", ...}``); never a host path or another kind of mount."""
    if isinstance(volume, dict):
        source, kind = str(volume.get("source", "")), volume.get("type", "volume")
    else:
        source, kind = (str(volume).split(":", 1)[0], "volume") if ":" in str(volume) else ("", "volume")
    if kind == "bind" or source.startswith(("/", ".", "~")) or "/" in source:
        return f"mounts host path {source!r}"
    if kind != "volume":
        return f"uses a {kind} mount (only volumes the engine manages)"
    return None


def _rfc3339(nanoseconds: int) -> str:
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"
