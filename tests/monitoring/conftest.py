"""The two metrics stores the monitoring tests run against, fed the same readings:
the embedded store (through the agent API, as agents report) and a real
VictoriaMetrics (its import API for readings in the past; its scraper for live
agents)."""

from __future__ import annotations

import pytest

from tests.monitoring.alerting import Rounds, held_fleet
from tests.support.agent import enroll
from tests.support.fleet import make_nodes
from tests.support.telemetry import AGENT_TELEMETRY, EmbeddedFeed, VictoriaFeed, enrolled_before
from tests.support.victoria import VictoriaMetrics


@pytest.fixture(scope="session")
def victoria(tmp_path_factory):
    server = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    yield server
    server.stop()


@pytest.fixture
def agent(api, flavor):
    """A node's agent, enrolled, posting a body to the telemetry API: ``agent(body)``
    answers the response, and ``agent.node`` is its node."""
    [node] = make_nodes(flavor, 1, prefix="agent")
    credential = enroll(api, node, "127.0.0.1")
    enrolled_before(node, 3600)  # its reports may carry readings taken a while ago

    def report(body: dict):
        return api.post(AGENT_TELEMETRY, body, format="json", HTTP_AUTHORIZATION=f"Node {credential}")

    report.node = node
    return report


@pytest.fixture
def fleet(project, other_tenant_project, flavor):
    return held_fleet(project, other_tenant_project, flavor)


@pytest.fixture
def rounds(django_capture_on_commit_callbacks):
    return Rounds(django_capture_on_commit_callbacks)


@pytest.fixture(params=["embedded", "victoria"])
def store(request, settings, api):
    """Where the API reads from, and how readings get there."""
    if request.param == "victoria":
        server = request.getfixturevalue("victoria")
        settings.METRICS_URL = server.url
        return VictoriaFeed(server)
    settings.METRICS_URL = ""
    return EmbeddedFeed(api)
