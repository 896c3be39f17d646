"""What a node's exporter serves is the tenant's to write: a bare-metal tenant has root
on its node (decision 0024), so the series VictoriaMetrics scrapes from it carry
whatever ``gpu`` label that tenant chooses. A series whose GPU is not one a node can
have is not a GPU's: the alert rounds, the fleet and the metrics API pass over it,
and one tenant's node cannot stop the rounds that alert every other tenant."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.monitoring import fleet as fleet_view
from apps.monitoring.metrics import METRICS
from tests.monitoring.alerting import received, states
from tests.support.processes import wait_for
from tests.support.telemetry import readings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]
INTEGRATION = {"roles": ["GPUaaS Platform Integration"]}
# Labels no GPU has: not a number, past any node's GPUs, negative, past a database column.
FORGED_GPUS = ["x", "64", "-1", "70000"]
HOUR = 3600


def forge(victoria, node) -> None:
    """The node serves one temperature series per forged ``gpu`` label, hot enough to
    alert, beside the readings of its real GPUs."""
    moment = int(time.time() - 5)
    name = METRICS["temperature"].name
    lines = [
        f'{name}{{gpu="{gpu}",UUID="GPU-forged",node_id="{node.pk}"}} 99 {moment * 1000}'
        for gpu in FORGED_GPUS
    ]
    # And one without a gpu label at all (an empty label is none).
    lines.append(f'{name}{{UUID="GPU-forged",node_id="{node.pk}"}} 99 {moment * 1000}')
    victoria.import_prometheus("\n".join(lines) + "\n")
    wait_for(
        lambda: len(victoria.query(f'{name}{{node_id="{node.pk}",UUID="GPU-forged"}}')) == len(lines),
        what="the forged series stored",
    )


@pytest.mark.parametrize("store", ["victoria"], indirect=True)
def test_forged_gpu_labels_on_one_tenants_node_do_not_stop_another_tenants_alerts(
    victoria, store, fleet, receiver, rounds
):
    theirs = fleet[-1]  # globex's
    now = time.time()
    store.feed(theirs, readings(now - 120, now - 5, 60, gpus=1, temperature=95.0))
    forge(victoria, fleet[0])  # acme's
    rounds.at(0)
    rounds.at(120)
    rounds.at(135)
    assert states(receiver, "gpu_temperature_critical") == ["firing"]
    fired = received(receiver, "gpu_temperature_critical")
    assert [(a["tenant_id"], a["gpu"]) for a in fired] == [("globex", 0)]


@pytest.mark.parametrize("store", ["victoria"], indirect=True)
def test_the_fleet_and_the_metrics_api_pass_over_forged_gpu_labels(api, ccp_issuer, victoria, store, fleet):
    ours, now = fleet[0], time.time()
    store.feed(ours, readings(now - 600, now - 5, 60, gpus=1, temperature=50.0))
    # The database is the session's: other tests' GPUs are in the fleet too.
    gpus = fleet_view.temperature_bands()["gpus"]
    forge(victoria, ours)
    assert fleet_view.temperature_bands()["gpus"] == gpus
    token = ccp_issuer.token(INTEGRATION)
    response = api.get("/api/metrics/gpu/acme", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    gpus = {(s["node_id"], s["gpu"]) for s in response.json()["series"] if s["metric"] == "temperature"}
    assert gpus == {(str(ours.pk), 0)}


@pytest.fixture
def exporter():
    """A node's metrics endpoint serving what the test gives it: ``exporter(text)``
    answers its port."""
    servers = []

    def serve(text: str) -> int:
        payload = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # Polled for shutdown every 50 ms: the default half second was the teardown's wait.
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def scrape(victoria):
    """Point the scraper at a node's endpoint (``scrape(port)``) and wait for its first
    scrape: answers the node id and the ``up`` it got (0: the scrape was refused)."""

    def scraped(port: int) -> tuple[str, str]:
        node_id = str(uuid.uuid4())
        target = {"targets": [f"127.0.0.1:{port}"], "labels": {"node_id": node_id}}
        victoria.targets.write_text(json.dumps([target]))
        [(_, up)] = wait_for(lambda: victoria.query(f'up{{node_id="{node_id}"}}'), what="the node scraped")
        return node_id, up

    yield scraped
    victoria.targets.write_text("[]")


def test_the_scraper_keeps_no_series_of_a_node_that_serves_too_many(victoria, exporter, scrape):
    # A new label value each, as a tenant flooding the database with series would.
    flood = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-flood",job_id="{n}"}} 1\n' for n in range(5000))
    node_id, up = scrape(exporter(flood))
    assert up == "0"  # the scrape was refused whole
    assert victoria.series(f'DCGM_FI_DEV_GPU_UTIL{{node_id="{node_id}"}}') == []


def test_a_node_cannot_date_its_samples_into_another_holders_time(victoria, exporter, scrape):
    # The node held by its tenant now serves a sample dated two hours back, when the node
    # was another tenant's: the scraper keeps it at the time it scraped it.
    back = time.time() - 2 * HOUR
    name = METRICS["temperature"].name
    node_id, up = scrape(exporter(f'{name}{{gpu="0",UUID="GPU-x"}} 99 {int(back * 1000)}\n'))
    assert up == "1"
    exported = {"match[]": f'{name}{{node_id="{node_id}"}}'}

    def export() -> str:
        victoria.flush()
        return victoria.http.get("/api/v1/export", params=exported, timeout=10).text.strip()

    stored = json.loads(wait_for(export, what="the sample stored"))
    assert min(stored["timestamps"]) / 1000 > back + HOUR


@pytest.mark.parametrize("store", ["victoria"], indirect=True)
def test_a_reading_that_is_not_a_number_alerts_no_one(
    api, ccp_issuer, victoria, store, fleet, receiver, rounds
):
    # Infinity breaches every threshold, and no JSON can carry it: the list every
    # tenant's alerts are in (CCP's GET /api/alerts) would answer 500. (VictoriaMetrics
    # answers no NaN.)
    node, moment = fleet[0], int(time.time() - 5)
    name = METRICS["temperature"].name
    lines = [
        f'{name}{{gpu="{gpu}",UUID="GPU-{gpu}",node_id="{node.pk}"}} {value} {moment * 1000}'
        for gpu, value in enumerate(["+Inf", "-Inf"])
    ]
    victoria.import_prometheus("\n".join(lines) + "\n")
    wait_for(
        lambda: len(victoria.query(f'{name}{{node_id="{node.pk}"}}')) == len(lines),
        what="the readings stored",
    )
    for second in (0, 120, 135):
        rounds.at(second)
    response = api.get("/api/alerts", HTTP_AUTHORIZATION=f"Bearer {ccp_issuer.token(INTEGRATION)}")
    assert response.status_code == 200, response.content
    assert received(receiver) == []
