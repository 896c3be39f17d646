"""What the platform hands the node agent, compared with golden files.

Set ``UPDATE_GOLDEN=1`` to rewrite them after an intended change, then review the diff.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from apps.catalog.manifests import clean_parameters
from apps.catalog.models import App, AppVersion
from apps.runtime import rendering
from apps.runtime.models import AppInstance
from tests.factories import shipped_manifest

GOLDEN = Path(__file__).parent / "golden"
INSTANCE_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
PROJECT_ID = uuid.UUID("66666666-7777-8888-9999-000000000000")


def instance_of(slug: str, parameters: dict) -> AppInstance:
    """An unsaved instance: rendering reads only these fields."""
    manifest = shipped_manifest(slug)
    cleaned, errors = clean_parameters(manifest, parameters)
    assert not errors
    return AppInstance(
        id=INSTANCE_ID,
        project_id=PROJECT_ID,
        parameters=cleaned,
        app=App(slug=slug),
        app_version=AppVersion(manifest=manifest),
    )


def check_golden(name: str, spec: dict) -> None:
    path = GOLDEN / f"{name}.json"
    rendered = json.dumps(spec, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text(), f"{name} differs from {path}; UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize(
    ("name", "slug", "parameters"),
    [
        ("jupyterlab_single_container", "jupyterlab", {"idle_minutes": 30}),
        ("vllm_compose_with_chat", "vllm-openai", {"tensor_parallel": 2}),
        ("vllm_compose_without_chat", "vllm-openai", {"chat_ui": False}),
        ("netdata_single_container", "netdata", {}),
    ],
)
def test_start_spec_matches_golden(name, slug, parameters):
    check_golden(name, rendering.start_spec(instance_of(slug, parameters)))


@pytest.mark.parametrize("slug", ["jupyterlab", "vllm-openai", "netdata"])
def test_rendered_tasks_are_safe(slug):
    spec = rendering.start_spec(instance_of(slug, {}))
    text = json.dumps(spec)
    assert "privileged" not in text
    assert "volumes" not in text
    assert "/var/run/docker.sock" not in text
    images = (
        [spec["container"]["image"]]
        if "container" in spec
        else [service["image"] for service in spec["compose"]["document"]["services"].values()]
    )
    assert all("@sha256:" in image for image in images)
    assert "{{ params." not in text
    assert "{{ proxy." not in text
    assert "{{ instance." not in text
    for name in spec["secrets"]:
        assert f"{{{{ secret.{name} }}}}" in text  # a reference for the agent, never the value
