"""Manifest validation: the shipped manifests are valid; each kind of mistake is
reported with its path, and publishing refuses an invalid manifest with all of them."""

from __future__ import annotations

import copy

import pytest

from apps.catalog import manifests, services
from apps.catalog.models import AppVersion
from apps.core.errors import ValidationFailed
from tests.factories import AppFactory, shipped_manifest


@pytest.mark.parametrize("name", ["jupyterlab", "vllm-openai", "netdata"])
def test_shipped_manifests_are_valid(name):
    assert manifests.validate(shipped_manifest(name)) == []


def broken(change) -> dict:
    manifest = copy.deepcopy(shipped_manifest("jupyterlab"))
    change(manifest)
    return manifest


CASES = {
    "tag instead of digest": (lambda m: m["artifacts"][0].update(digest="latest"), "artifacts/0/digest"),
    "short digest": (lambda m: m["artifacts"][0].update(digest="sha256:abc"), "artifacts/0/digest"),
    "missing artifacts": (lambda m: m.pop("artifacts"), "'artifacts' is a required property"),
    "unknown field": (lambda m: m.update(privileged=True), "Additional properties are not allowed"),
    "bad port": (lambda m: m["endpoints"][0].update(container_port=70000), "endpoints/0/container_port"),
    "bad exposure": (
        lambda m: m["endpoints"][0].update(exposure_modes=["public"]),
        "endpoints/0/exposure_modes/0",
    ),
    "choice without choices": (
        lambda m: m["parameters"].append({"name": "x", "type": "choice"}),
        "'choices' is a required property",
    ),
    "default out of bounds": (
        lambda m: m["parameters"][1].update(default=1),
        "parameters/idle_minutes/default",
    ),
    "unknown template": (
        lambda m: m["execution"]["args"].append("{{ params.nope }}"),
        "unknown template reference {{ params.nope }}",
    ),
    "unknown artifact": (lambda m: m["execution"].update(artifact="other"), "no artifact named 'other'"),
    "duplicate endpoint": (
        lambda m: m["endpoints"].append(copy.deepcopy(m["endpoints"][0])),
        "endpoints: duplicate names web",
    ),
    "user compose yaml": (
        lambda m: m.update(execution={"kind": "compose", "renderer": "user-yaml", "services": []}),
        "execution",
    ),
    "too many gpus": (lambda m: m["resources"].update(gpus=64), "resources/gpus"),
    "wrong schema version": (lambda m: m.update(schema_version="9"), "schema_version: unknown version '9'"),
    "endpoints without end": (
        lambda m: m["endpoints"].extend(
            {**m["endpoints"][0], "name": f"web{n}", "exposure_modes": ["private"]} for n in range(64)
        ),
        "endpoints: at most 64",
    ),
    "tcp through the proxy": (
        lambda m: m["endpoints"][0].update(protocol="tcp"),
        "only http endpoints can use platform_proxy",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_kind_of_invalid_manifest_is_reported(case):
    change, expected = CASES[case]
    errors = manifests.validate(broken(change))
    assert errors, case
    assert any(expected in error for error in errors), errors


@pytest.mark.django_db
def test_publishing_an_invalid_manifest_lists_every_error_and_publishes_nothing():
    app = AppFactory(slug="broken", entitled_to_all=False)

    def two_mistakes(m):
        m["artifacts"][0]["digest"] = "latest"
        m["endpoints"][0]["container_port"] = 0

    with pytest.raises(ValidationFailed) as raised:
        services.publish_version(None, app, version="1.0.0", manifest=broken(two_mistakes))
    assert len(raised.value.details["manifest"]) == 2
    assert not AppVersion.objects.exists()


@pytest.mark.parametrize(
    ("values", "errors"),
    [
        ({}, {}),
        ({"idle_minutes": 4}, {"idle_minutes": ["Must be at least 5."]}),
        ({"idle_minutes": "ten"}, {"idle_minutes": ["Must be a whole number."]}),
        ({"idle_minutes": 2.5}, {"idle_minutes": ["Must be a whole number."]}),
        ({"idle_minutes": 10**400}, {"idle_minutes": ["Must be at most 1440."]}),  # no float holds it
        ({"default_path": "javascript:alert(1)"}, {"default_path": ["Has the wrong format."]}),
        ({"surprise": 1}, {"surprise": ["Not a parameter of this app."]}),
    ],
)
def test_launch_parameters_are_checked_against_the_manifest(values, errors):
    cleaned, found = manifests.clean_parameters(shipped_manifest("jupyterlab"), values)
    assert found == errors
    if not errors:
        assert cleaned == {"default_path": "/lab", "idle_minutes": 60}


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_number_parameter_is_finite(value):
    """JSON reads 1e400 as infinity, which the database's JSON refuses to keep."""
    manifest = shipped_manifest("jupyterlab")
    manifest["parameters"] = [{"name": "ratio", "type": "number", "label": "Ratio"}]
    _, errors = manifests.clean_parameters(manifest, {"ratio": value})
    assert errors == {"ratio": ["Must be a number."]}


def test_choice_and_boolean_parameters():
    manifest = shipped_manifest("vllm-openai")
    cleaned, errors = manifests.clean_parameters(manifest, {"tensor_parallel": 2, "chat_ui": False})
    assert errors == {}
    assert cleaned["tensor_parallel"] == 2
    assert cleaned["chat_ui"] is False
    _, errors = manifests.clean_parameters(manifest, {"tensor_parallel": 3, "chat_ui": "yes"})
    assert set(errors) == {"tensor_parallel", "chat_ui"}
