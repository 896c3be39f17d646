"""The container executor: the engine commands it builds from the specs the
platform renders (the rendering tests' golden files), and what it refuses to
run. No engine needed: a stand-in ``docker`` program records its calls."""

from __future__ import annotations

import copy
import json
import stat
import sys
from pathlib import Path

import pytest

from node_agent.executors.base import TaskFailed
from node_agent.executors.docker import (
    DockerExecutor,
    compose_document,
    compose_up_command,
    run_command,
    validate,
)
from node_agent.executors.templates import references
from tests.support.processes import wait_for
from tests.support.specs import IID

GOLDEN = Path(__file__).parents[1] / "runtime" / "golden"  # tests/runtime/test_rendering.py writes them
PROJECT = "66666666-7777-8888-9999-000000000000"
JUPYTER_IMAGE = (
    "quay.io/jupyter/pytorch-notebook@sha256:6d1c5bdb2a4f2ad2d7c1f1b4e2b7f2c0d6a3f8b1e0c9d8a7b6c5d4e3f2a1b0c9"
)


# vLLM takes an optional Hugging Face token: the platform sends every secret a task
# names, empty when the launch named none.
NO_HF_TOKEN = {"hf_token": ""}


def spec(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def test_docker_run_for_a_single_container():
    command = run_command(
        spec("jupyterlab_single_container"),
        references({"web": 41001}, {}, "10.20.0.7"),
        Path("/state/secrets.env"),
    )
    assert command == [
        "docker",
        "run",
        "--detach",
        "--name",
        f"gpuaas-{IID}",
        "--label",
        "gpuaas.app=jupyterlab",
        "--label",
        f"gpuaas.instance={IID}",
        "--label",
        f"gpuaas.project={PROJECT}",
        "--gpus",
        "1",
        "--publish",
        "10.20.0.7:41001:8888",  # the node's address: the platform proxy connects there
        "--env-file",
        "/state/secrets.env",  # JUPYTER_TOKEN: a secret, so never on the command line
        "--security-opt",
        "no-new-privileges:true",
        "--restart",
        "unless-stopped",
        JUPYTER_IMAGE,
        "start-notebook.py",
        "--ServerApp.ip=0.0.0.0",
        "--ServerApp.port=8888",
        "--LabApp.default_url=/lab",
        f"--ServerApp.base_url=/w/{IID}/web/",
    ]


def test_docker_run_without_gpus_or_secrets():
    command = run_command(spec("netdata_single_container"), references({"dashboard": 41002}, {}, "fd00::7"))
    assert "--gpus" not in command
    assert "--env-file" not in command
    assert command[command.index("--publish") + 1] == "[fd00::7]:41002:19999"
    first = command.index("--env")
    assert command[first : first + 4] == ["--env", "NETDATA_DB_HOURS=24", "--env", "NETDATA_DISABLE_CLOUD=1"]


def test_compose_project_gets_the_document_on_stdin_with_ports_filled_in():
    rendered = spec("vllm_compose_with_chat")
    assert compose_up_command(rendered) == [
        "docker",
        "compose",
        "--project-name",
        f"gpuaas-{IID}",
        "--file",
        "-",
        "up",
        "--detach",
    ]
    document = compose_document(rendered, references({"api": 41003, "chat": 41004}, NO_HF_TOKEN, "10.20.0.7"))
    assert document["services"]["vllm"]["ports"] == ["10.20.0.7:41003:8000"]
    assert document["services"]["chat"]["ports"] == ["10.20.0.7:41004:8080"]
    in_brackets = compose_document(
        rendered, references({"api": 41003, "chat": 41004}, NO_HF_TOKEN, "fd00::7")
    )
    assert in_brackets["services"]["vllm"]["ports"] == ["[fd00::7]:41003:8000"]
    expected = copy.deepcopy(rendered["compose"]["document"])
    for service in expected["services"].values():
        service.pop("ports")
    # The secret stays out of the document: a variable the agent passes in compose's environment.
    expected["services"]["vllm"]["environment"]["HF_TOKEN"] = "${GPUAAS_SECRET_HF_TOKEN}"
    for service in document["services"].values():
        service.pop("ports")
    assert document == expected  # nothing else changed


def test_compose_secrets_become_variables_and_dollars_stay_literal():
    rendered = spec("vllm_compose_without_chat")
    rendered["compose"]["document"]["services"]["vllm"]["environment"] = {
        "VLLM_API_KEY": "{{ secret.api-key }}",
        "PROMPT": "costs $5",
    }
    document = compose_document(
        rendered, references({"api": 41005}, {"api-key": "s3cr3t-value"}, "127.0.0.1")
    )
    assert document["services"]["vllm"]["environment"] == {
        "VLLM_API_KEY": "${GPUAAS_SECRET_API_KEY}",
        "PROMPT": "costs $$5",
    }
    assert "s3cr3t-value" not in json.dumps(document)


def unpinned(rendered: dict) -> dict:
    rendered["container"]["image"] = "quay.io/jupyter/pytorch-notebook:latest"
    return rendered


def host_path(rendered: dict) -> dict:
    rendered["compose"]["document"]["services"]["vllm"]["volumes"] = ["/root/.cache/huggingface:/models"]
    return rendered


def privileged(rendered: dict) -> dict:
    rendered["compose"]["document"]["services"]["vllm"]["privileged"] = True
    return rendered


def every_interface(rendered: dict) -> dict:
    rendered["compose"]["document"]["services"]["vllm"]["ports"] = ["0.0.0.0:{{ port.api }}:8000"]
    return rendered


def privileged_container(rendered: dict) -> dict:
    rendered["container"]["privileged"] = True
    return rendered


@pytest.mark.parametrize(
    ("golden", "change", "reason"),
    [
        (
            "jupyterlab_single_container",
            unpinned,
            "image 'quay.io/jupyter/pytorch-notebook:latest' is not pin",
        ),
        ("vllm_compose_with_chat", host_path, "service 'vllm': mounts host path '/root/.cache/huggingface'"),
        ("vllm_compose_with_chat", privileged, "service 'vllm': it asks for privileged mode"),
        ("jupyterlab_single_container", privileged_container, "the container asks for privileged mode"),
        (
            "vllm_compose_with_chat",
            every_interface,
            "service 'vllm': publishes '0.0.0.0:{{ port.api }}:8000' (only {{ node.address }}:",
        ),
    ],
)
def test_unsafe_specs_are_refused_before_anything_runs(tmp_path, golden, change, reason):
    docker = FakeDocker(tmp_path)
    with pytest.raises(TaskFailed, match="refused to run the task") as refused:
        docker.executor.start(change(spec(golden)), {"token": "t"}, "127.0.0.1")
    assert reason in str(refused.value)
    assert docker.calls() == []


def test_named_volumes_and_the_rendered_specs_pass():
    for name in (
        "jupyterlab_single_container",
        "netdata_single_container",
        "vllm_compose_with_chat",
        "vllm_compose_without_chat",
    ):
        validate(spec(name))
    rendered = spec("vllm_compose_with_chat")
    rendered["compose"]["document"]["services"]["vllm"]["volumes"] = ["models:/models", "/scratch"]
    validate(rendered)


class FakeDocker:
    """A ``docker`` program that records each call (argv, stdin, the env file's
    content at call time) and lists one running instance."""

    def __init__(self, tmp_path: Path):
        self.log = tmp_path / "calls.jsonl"
        program = tmp_path / "docker"
        program.write_text(f"""#!{sys.executable}
import json, sys
argv = sys.argv[1:]
env_file = argv[argv.index("--env-file") + 1] if "--env-file" in argv else None
call = {{"argv": argv, "stdin": sys.stdin.read(),
        "env_file": open(env_file).read() if env_file else None}}
with open({str(self.log)!r}, "a") as log:
    log.write(json.dumps(call) + "\\n")
if argv[0] == "ps":
    print("{IID} ")
if "logs" in argv[:4]:  # what the container printed, then following (until stopped)
    import time
    print("serving on :8888", flush=True)
    print("a warning", file=sys.stderr, flush=True)
    time.sleep(60)
""")
        program.chmod(program.stat().st_mode | stat.S_IEXEC)
        self.executor = DockerExecutor(tmp_path / "state", docker=str(program))

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def test_executor_runs_the_container_with_its_secret_in_a_removed_env_file(tmp_path):
    docker = FakeDocker(tmp_path)
    endpoints = docker.executor.start(
        spec("jupyterlab_single_container"), {"token": "the-app-token"}, "127.0.0.2"
    )
    [(name, host, port)] = [(e["name"], e["host"], e["port"]) for e in endpoints]
    assert (name, host) == ("web", "127.0.0.2")
    assert port > 1024
    replace, run = docker.calls()
    assert replace["argv"] == ["rm", "--force", "--volumes", f"gpuaas-{IID}"]
    assert run["argv"][:3] == ["run", "--detach", "--name"]
    assert f"127.0.0.2:{port}:8888" in run["argv"]
    assert run["env_file"] == "JUPYTER_TOKEN=the-app-token\n"
    assert "the-app-token" not in json.dumps(run["argv"])
    assert list((tmp_path / "state").iterdir()) == []  # the env file is gone

    assert docker.executor.running() == [IID]
    stop_spec = {"instance_id": IID, "name": f"gpuaas-{IID}", "execution": "single_container"}
    docker.executor.stop(stop_spec)
    docker.executor.remove(stop_spec)
    assert [call["argv"] for call in docker.calls()[-3:]] == [
        [
            "ps",
            "--filter",
            "label=gpuaas.instance",
            "--format",
            '{{.Label "gpuaas.instance"}} {{.Label "com.docker.compose.project"}}',
        ],
        ["stop", f"gpuaas-{IID}"],
        ["rm", "--force", "--volumes", f"gpuaas-{IID}"],
    ]


def test_executor_brings_a_compose_project_up_and_down(tmp_path):
    docker = FakeDocker(tmp_path)
    docker.executor.start(spec("vllm_compose_without_chat"), NO_HF_TOKEN, "127.0.0.1")
    [up] = docker.calls()
    assert up["argv"] == ["compose", "--project-name", f"gpuaas-{IID}", "--file", "-", "up", "--detach"]
    image = json.loads(up["stdin"])["services"]["vllm"]["image"]
    assert image.startswith("docker.io/vllm/vllm-openai@sha256:")
    docker.executor.remove({"instance_id": IID, "name": f"gpuaas-{IID}", "execution": "compose"})
    assert docker.calls()[-1]["argv"] == [
        "compose",
        "--project-name",
        f"gpuaas-{IID}",
        "down",
        "--volumes",
        "--remove-orphans",
    ]


def test_a_containers_output_is_followed_into_its_file_and_resumed_after_a_restart(tmp_path):
    """The log shipper reads each running instance's output file: the executor keeps a
    ``docker logs --follow`` appending to it, and a new agent (after a restart) follows
    on from the file's last write instead of the container's first line."""
    docker = FakeDocker(tmp_path)
    docker.executor.start(spec("jupyterlab_single_container"), {"token": "t"}, "127.0.0.1")
    [(instance_id, path)] = docker.executor.outputs().items()
    assert instance_id == IID
    wait_for(lambda: "a warning" in path.read_text(), timeout=30, what="the container's output")
    assert path.read_text().splitlines() == ["serving on :8888", "a warning"]
    [follow] = [c["argv"] for c in docker.calls() if c["argv"][0] == "logs"]
    assert follow == ["logs", "--follow", f"gpuaas-{IID}"]
    docker.executor.outputs()  # the follower runs on: not started twice
    assert len([c for c in docker.calls() if c["argv"][0] == "logs"]) == 1

    restarted = DockerExecutor(tmp_path / "state", docker=docker.executor.docker)
    assert restarted.outputs() == {IID: path}
    wait_for(lambda: len([c for c in docker.calls() if c["argv"][0] == "logs"]) == 2, timeout=30)
    resumed = [c["argv"] for c in docker.calls() if c["argv"][0] == "logs"][-1]
    assert resumed[:3] == ["logs", "--follow", "--since"]
    assert resumed[3].endswith("Z")
    assert resumed[4] == f"gpuaas-{IID}"

    stop_spec = {"instance_id": IID, "name": f"gpuaas-{IID}", "execution": "single_container"}
    for executor in (docker.executor, restarted):
        executor.remove(stop_spec)
    assert not path.exists()
