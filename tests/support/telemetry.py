"""GPU readings as agents report them, and the two ways the monitoring tests feed them
to a metrics store: the embedded store through the agent API, as agents report, and a
real VictoriaMetrics through its import API, as its scraper would have stored them."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from apps.allocations import nodes as node_service
from apps.allocations.models import Node
from apps.monitoring.metrics import METRICS
from tests.support.processes import wait_for
from tests.support.victoria import VictoriaMetrics

AGENT_TELEMETRY = "/api/agent/v1/telemetry"


def readings(start: float, end: float, every: int, *, gpus: int = 2, **values) -> list[dict]:
    """Readings of ``gpus`` GPUs every ``every`` seconds from ``start`` to ``end``; each
    GPU's values are the given ones plus its index (so GPUs are told apart)."""
    base = {
        "utilization": 50.0,
        "memory_used": 1000.0,
        "memory_free": 80000.0,
        "temperature": 40.0,
        "power": 300.0,
    }
    base.update(values)
    out, moment = [], start
    while moment <= end:
        for gpu in range(gpus):
            out.append(
                {"gpu": gpu, "uuid": f"GPU-test-{gpu}", "at": moment, **{k: v + gpu for k, v in base.items()}}
            )
        moment += every
    return out


def enrolled_before(node, seconds: float) -> None:
    """The node's agent enrolled at least ``seconds`` ago (what it reports is kept from then on)."""
    since = timezone.now() - timedelta(seconds=seconds + 60)
    Node.objects.filter(pk=node.pk, enrolled_at__gt=since).update(enrolled_at=since)


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
