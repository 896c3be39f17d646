"""The two metrics stores the monitoring tests run against, fed the same readings:
the embedded store (through the agent API, as agents report) and a real
VictoriaMetrics (its import API for readings in the past; its scraper for live
agents)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.allocations import nodes as node_service
from apps.allocations.models import Node
from apps.monitoring.metrics import METRICS
from tests.monitoring.alerting import Rounds, held_fleet
from tests.support.agent import enroll
from tests.support.fleet import make_nodes
from tests.support.processes import wait_for
from tests.support.telemetry import AGENT_TELEMETRY
from tests.support.victoria import VictoriaMetrics


def enrolled_before(node, seconds: float) -> None:
    """The node's agent enrolled at least ``seconds`` ago (what it reports is kept from then on)."""
    since = timezone.now() - timedelta(seconds=seconds + 60)
    Node.objects.filter(pk=node.pk, enrolled_at__gt=since).update(enrolled_at=since)


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


class EmbeddedFeed:
    name = "embedded"

    def __init__(self, client):
        self.client, self.credentials = client, {}

    def feed(self, node, readings: list[dict]) -> None:
        credential = self.credentials.get(node.pk)
        if credential is None:
            token = node_service.issue_bootstrap_token(node)
            _, credential = node_service.enroll(node.hostname, token, address="127.0.0.1")
            self.credentials[node.pk] = credential
        # An agent reporting this history was enrolled before it (nothing earlier is kept).
        enrolled_before(node, time.time() - min(r["at"] for r in readings))
        for first in range(0, len(readings), 512):
            response = self.client.post(
                AGENT_TELEMETRY,
                {"readings": readings[first : first + 512]},
                format="json",
                HTTP_AUTHORIZATION=f"Node {credential}",
            )
            assert response.status_code == 200, response.content


class VictoriaFeed:
    """Samples as the scraper would store them, with the node label the target file
    gives; a tenant label that is wrong on purpose, since attribution must not use it."""

    name = "victoria"

    def __init__(self, server: VictoriaMetrics):
        self.server = server

    def feed(self, node, readings: list[dict]) -> None:
        lines = []
        for r in readings:
            labels = (
                f'gpu="{r["gpu"]}",UUID="{r["uuid"]}",Hostname="{node.hostname}",'
                f'node_id="{node.pk}",tenant_id="not-this-one"'
            )
            for metric in METRICS.values():
                lines.append(f"{metric.name}{{{labels}}} {r[metric.column]} {int(r['at'] * 1000)}")
        self.server.import_prometheus("\n".join(lines) + "\n")
        # The evaluator's instant queries must see the newest sample of every metric, as a
        # scrape's would be seen before the next round: under load VictoriaMetrics has
        # answered with one metric's new series and not yet another's. Asked as the
        # evaluator asks, by the metric's name alone: rounds in CI missed new series that
        # a query naming the node had already found.
        newest = int(max(r["at"] for r in readings))
        gpus = len({r["gpu"] for r in readings})

        def every_series_current() -> bool:
            return all(
                sum(
                    labels.get("node_id") == str(node.pk) and float(value) >= newest
                    for labels, value in self.server.query(f"tlast_over_time({m.name}[5m])")
                )
                == gpus
                for m in METRICS.values()
            )

        wait_for(
            every_series_current,
            timeout=15,
            what=f"VictoriaMetrics answering with the samples of {node.hostname}",
        )


@pytest.fixture(params=["embedded", "victoria"])
def store(request, settings, api):
    """Where the API reads from, and how readings get there."""
    if request.param == "victoria":
        server = request.getfixturevalue("victoria")
        settings.METRICS_URL = server.url
        return VictoriaFeed(server)
    settings.METRICS_URL = ""
    return EmbeddedFeed(api)
