"""An app instance's start spec as the platform hands it to a node agent's process
executor, for the executor's tests."""

from __future__ import annotations

IID = "11111111-2222-3333-4444-555555555555"


def process_spec(command: list[str], env: dict | None = None) -> dict:
    return {
        "instance_id": IID,
        "name": f"gpuaas-{IID}",
        "execution": "single_container",
        "endpoints": [{"name": "web", "protocol": "http", "container_port": 8888}],
        "secrets": ["token"],
        "process": {"command": command, "env": env or {}, "ready_path": "/w/ready"},
    }
