"""End to end with a real node agent: ``simulate_gpu`` holds a reading, the agent
reports it (embedded store) or a real VictoriaMetrics scrapes it, an evaluation
round fires the rule and CCP's receiver gets it signed; cleared, it resolves. The
node's own CPU and memory utilization (read from ``/proc``) feed their rules too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command

from apps.allocations.models import Allocation
from apps.monitoring import tasks
from apps.monitoring.alerts import evaluation
from apps.monitoring.models import Measurement, NodeExporter
from tests.monitoring.alerting import received, states
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("shipped_alert_rules"),
]
RULE = "gpu_memory_critical"


@pytest.fixture(params=["embedded", "victoria"])
def live_store(request, settings, active_allocation):
    settings.METRICS_INTERVAL_SECONDS = 1
    Allocation.objects.filter(pk=active_allocation.pk).update(
        activated_at=active_allocation.activated_at - timedelta(hours=1)
    )
    if request.param == "embedded":
        settings.METRICS_URL = ""
        yield None
        return
    server = request.getfixturevalue("victoria")
    settings.METRICS_URL = server.url
    settings.METRICS_TARGETS_FILE = server.targets
    yield server
    server.targets.write_text("[]")


def rounds_until(predicate, what: str):
    def evaluated():
        evaluation.evaluate()
        return predicate()

    return wait_for(evaluated, timeout=150, what=what)


def test_a_held_reading_fires_once_and_resolves_once(
    live_store, node_agent, active_allocation, receiver, settings
):
    node = active_allocation.node
    if live_store is not None:
        wait_for(lambda: NodeExporter.objects.filter(node=node).exists(), what="the agent's exporter")
        tasks.write_scrape_targets()
    call_command("simulate_gpu", node.hostname, "--gpu", "0", "--memory", "97")
    alerts = rounds_until(lambda: received(receiver, RULE), "the alert at CCP")
    assert len(alerts) == 1, alerts
    [fired] = alerts
    assert (fired["state"], fired["hostname"], fired["gpu"]) == ("firing", node.hostname, 0)
    assert (fired["tenant_id"], fired["project_id"]) == ("acme", "cell-1")
    assert fired["value"] > 95
    assert receiver.requests[-1]["verified"]

    settings.ALERT_RESOLVE_AFTER_SECONDS = 0
    call_command("simulate_gpu", node.hostname, "--clear")
    rounds_until(lambda: states(receiver, RULE) == ["firing", "resolved"], "the resolution at CCP")
    evaluation.evaluate()
    assert states(receiver, RULE) == ["firing", "resolved"]


def node_reading(node, metric: str) -> float | None:
    return Measurement.objects.filter(metric=metric, node=node).values_list("value", flat=True).first()


def test_the_nodes_cpu_reading_fires_its_rule_and_resolves(settings, node_agent, active_allocation, receiver):
    settings.METRICS_URL, settings.METRICS_INTERVAL_SECONDS = "", 1
    node, rule = active_allocation.node, "cpu_utilization_warning"
    # What /proc says on this machine, before anything is held.
    wait_for(
        lambda: None not in (node_reading(node, "cpu_utilization"), node_reading(node, "memory_utilization")),
        what="the node's CPU and memory readings",
    )
    assert 0 <= node_reading(node, "cpu_utilization") <= 100
    assert 0 < node_reading(node, "memory_utilization") < 100

    # Above the warning's 75 %, under the critical 90 %; evaluated once the agent sent it,
    # so that this busy machine's own reading does not fire first.
    call_command("simulate_gpu", node.hostname, "--cpu", "80")
    wait_for(lambda: node_reading(node, "cpu_utilization") == 80.0, what="the held CPU reading")
    [fired] = rounds_until(lambda: received(receiver, rule), "the alert at CCP")
    assert (fired["state"], fired["hostname"], fired["value"]) == ("firing", node.hostname, 80.0)
    assert (fired["tenant_id"], fired["project_id"]) == ("acme", "cell-1")
    assert receiver.requests[-1]["verified"]

    settings.ALERT_RESOLVE_AFTER_SECONDS = 0
    call_command("simulate_gpu", node.hostname, "--cpu", "10")
    rounds_until(lambda: states(receiver, rule) == ["firing", "resolved"], "the resolution at CCP")
