from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.allocations import services as allocations
from apps.catalog import services as catalog
from apps.catalog.models import App
from apps.tenancy import principal as principals
from tests.allocations.conftest import (  # noqa: F401 - fixtures shared with the allocation tests
    allocator,
    flavor,
    make_nodes,
    nodes,
    ready_tenant,
    small_flavor,
)
from tests.runtime.agent_fixtures import node_agent, portal  # noqa: F401 - the real node agent's fixtures

SHIPPED = Path(__file__).resolve().parents[2] / "apps" / "catalog" / "shipped"


def publish(slug: str, *, entitled_to_all: bool = True, version: str = "1.0.0") -> App:
    manifest = json.loads((SHIPPED / f"{slug}.json").read_text())
    app = App.objects.create(slug=slug, name=slug.title(), entitled_to_all=entitled_to_all)
    catalog.publish_version(None, app, version=version, manifest=manifest)
    return app


@pytest.fixture
def jupyterlab(db):
    return publish("jupyterlab")


@pytest.fixture
def vllm(db):
    return publish("vllm-openai")


@pytest.fixture
def active_allocation(allocator, project, nodes, django_capture_on_commit_callbacks):  # noqa: F811
    with django_capture_on_commit_callbacks(execute=True):
        [allocation] = allocations.allocate(
            principals.for_user(allocator), project, flavor_name="h100-8x", os_image="ubuntu-22.04"
        )
    allocation.refresh_from_db()
    assert allocation.state == "ACTIVE"
    # An agent is enrolled on the node (tests play its part, or start a real one that re-enrolls),
    # from this machine: its apps are reached on loopback.
    type(allocation.node).objects.filter(pk=allocation.node_id).update(
        credential_hash="0" * 64, agent_address="127.0.0.1"
    )
    allocation.node.refresh_from_db()
    return allocation
