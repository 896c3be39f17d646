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
def flooding_exporter():
    """A node's metrics endpoint serving far more series than a node has GPUs: a new
    label value each, as a tenant flooding the database with series would."""
    body = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-flood",job_id="{n}"}} 1\n' for n in range(5000))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            payload = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_scraper_keeps_no_series_of_a_node_that_serves_too_many(victoria, flooding_exporter):
    node_id = str(uuid.uuid4())
    target = {"targets": [f"127.0.0.1:{flooding_exporter}"], "labels": {"node_id": node_id}}
    victoria.targets.write_text(json.dumps([target]))
    try:
        [(_, up)] = wait_for(lambda: victoria.query(f'up{{node_id="{node_id}"}}'), what="the node scraped")
        assert up == "0"  # the scrape was refused whole
        assert victoria.series(f'DCGM_FI_DEV_GPU_UTIL{{node_id="{node_id}"}}') == []
    finally:
        victoria.targets.write_text("[]")
