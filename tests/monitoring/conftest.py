"""The two metrics stores the monitoring tests run against, fed the same readings:
the embedded store (through the agent API, as agents report) and a real
VictoriaMetrics (its import API for readings in the past; its scraper for live
agents)."""

from __future__ import annotations

import pytest

from apps.allocations import nodes as fleet
from apps.monitoring.metrics import METRICS
from tests.support.processes import wait_for
from tests.support.telemetry import AGENT_TELEMETRY
from tests.support.victoria import VictoriaMetrics


@pytest.fixture(scope="session")
def victoria(tmp_path_factory):
    server = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    yield server
    server.stop()


class EmbeddedFeed:
    name = "embedded"

    def __init__(self, client):
        self.client, self.credentials = client, {}

    def feed(self, node, readings: list[dict]) -> None:
        credential = self.credentials.get(node.pk)
        if credential is None:
            token = fleet.issue_bootstrap_token(node)
            _, credential = fleet.enroll(node.hostname, token, address="127.0.0.1")
            self.credentials[node.pk] = credential
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
