"""The app pages and the sockets they open share a fleet of their own: three nodes
whose agents are enrolled, so a launch is accepted and the tests play the agent."""

from __future__ import annotations

import pytest

from apps.allocations.models import Node
from tests.factories import FlavorFactory
from tests.support.catalog import publish
from tests.support.fleet import allocation_on, make_nodes
from tests.support.members import member


# Overrides tests/conftest.py's (4 nodes, no agent; a priced flavor) for these modules only.
@pytest.fixture
def flavor(db):
    return FlavorFactory(name="h100-8x")


@pytest.fixture
def nodes(flavor):
    """Three nodes, each with an enrolled agent (the tests play its part, on this machine)."""
    nodes = make_nodes(flavor, 3)
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(
        credential_hash="0" * 64, agent_address="127.0.0.1"
    )
    for node in nodes:
        node.refresh_from_db()
    return nodes


@pytest.fixture
def allocation(project, nodes):
    return allocation_on(project, nodes[0])


# Named as an operator names it: the pages show the name.
@pytest.fixture
def jupyterlab(db):
    return publish("jupyterlab", name="JupyterLab")


@pytest.fixture
def admin(project):
    return member("project_admin", project=project)
