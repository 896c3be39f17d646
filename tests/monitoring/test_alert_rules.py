"""Every shipped alert rule fires once and resolves once, delivered to CCP, against
both metrics stores where the rule reads GPU telemetry: readings go in as agents
report them (embedded) or as VictoriaMetrics stores them; node heartbeats, XID
events and reported measurements come from the platform's own records."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from apps.allocations.models import Node
from apps.monitoring import services as monitoring
from apps.monitoring.alerts import services
from apps.monitoring.metrics import METRICS
from apps.monitoring.models import Alert, AlertRule
from apps.tenancy.principal import OPERATOR_CLI
from tests.monitoring.alerting import received, states
from tests.support.processes import wait_for
from tests.support.telemetry import readings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]

# A reading that breaches the rule and not the critical one above it (warnings).
GPU_RULES = {
    "gpu_temperature_warning": {"temperature": 85.0},
    "gpu_temperature_critical": {"temperature": 95.0},
    "gpu_memory_warning": {"memory_used": 73_000.0, "memory_free": 7_000.0},  # 91.25 %
    "gpu_memory_critical": {"memory_used": 78_000.0, "memory_free": 2_000.0},  # 97.5 %
}
MEASURED_RULES = {
    "cpu_utilization_warning": 80.0,
    "cpu_utilization_critical": 95.0,
    "memory_utilization_warning": 75.0,
    "memory_utilization_critical": 90.0,
    "storage_latency_warning": 12.0,
    "storage_latency_critical": 20.0,
    "storage_quota_warning": 85.0,
    "storage_quota_critical": 95.0,
    "quota_warning": 85.0,
    "quota_critical": 95.0,
}
OTHER_RULES = {"node_not_ready_warning", "node_not_ready_critical", "gpu_xid_warning", "gpu_xid_critical"}


def cool() -> tuple[float, float]:
    """A reading's moment that is the newest: a few seconds back, so VictoriaMetrics'
    instant query (at the whole second) includes it."""
    moment = time.time() - 5
    return moment, moment


def test_the_seed_thresholds_ship_one_rule_per_metric_and_severity():
    shipped = {r.name: (r.threshold, r.for_seconds) for r in AlertRule.objects.all()}
    assert set(shipped) == set(GPU_RULES) | set(MEASURED_RULES) | OTHER_RULES
    assert shipped["gpu_temperature_warning"] == (80, 300)
    assert shipped["gpu_temperature_critical"] == (90, 120)
    assert shipped["gpu_memory_warning"] == (90, 900)
    assert shipped["gpu_memory_critical"] == (95, 0)
    assert shipped["node_not_ready_warning"] == (0, 120)
    assert shipped["storage_quota_critical"] == (90, 0)
    assert shipped["storage_latency_warning"] == (10, 0)


@pytest.mark.parametrize("name", sorted(GPU_RULES))
def test_each_gpu_rule_fires_once_after_its_for_and_resolves_once(name, store, fleet, receiver, rounds):
    node = fleet[0]
    rule = AlertRule.objects.get(name=name)
    now = time.time()
    store.feed(node, readings(now - 120, now - 120, 60, gpus=1, **GPU_RULES[name]))
    rounds.at(0)
    if rule.for_seconds:
        rounds.at(rule.for_seconds - 1)
        assert states(receiver, name) == []
    rounds.at(rule.for_seconds)
    rounds.at(rule.for_seconds + 15)
    assert states(receiver, name) == ["firing"], rounds.log

    store.feed(node, readings(*cool(), 60, gpus=1))
    cleared = rule.for_seconds + 30
    rounds.at(cleared)
    assert states(receiver, name) == ["firing"]  # the condition must stay clear for a minute
    rounds.at(cleared + 60)
    rounds.at(cleared + 75)
    assert states(receiver, name) == ["firing", "resolved"], rounds.log

    fired, resolved = received(receiver, name)
    assert fired["alert_id"] == resolved["alert_id"]
    assert fired["event_id"] != resolved["event_id"]
    assert (fired["tenant_id"], fired["project_id"]) == ("acme", "cell-1")
    assert (fired["node_id"], fired["hostname"], fired["gpu"]) == (str(node.pk), node.hostname, 0)
    assert fired["severity"] == rule.severity
    assert fired["threshold"] == rule.threshold
    assert fired["value"] > rule.threshold
    assert fired["started_at"].endswith("Z")
    assert fired["resolved_at"] is None
    assert resolved["resolved_at"].endswith("Z")
    assert node.hostname in fired["summary"]
    assert set(fired) == {
        "event_id",
        "alert_id",
        "rule",
        "severity",
        "state",
        "tenant_id",
        "project_id",
        "node_id",
        "hostname",
        "gpu",
        "value",
        "threshold",
        "started_at",
        "resolved_at",
        "summary",
    }


def report(name: str, value: float, tenant, node) -> None:
    metric = AlertRule.objects.get(name=name).metric
    if metric in ("storage_quota", "quota"):
        # As metering's quota threshold signal delivers a crossing.
        resource = "storage_gb" if metric == "storage_quota" else "gpus"
        services.on_quota_level(None, tenant=tenant, resource=resource, rule=metric, percent=value, level="")
    else:
        services.record_measurement(metric, str(node.pk), value, node=node, label=node.hostname)


@pytest.mark.parametrize("name", sorted(MEASURED_RULES))
def test_each_measured_rule_fires_once_and_resolves_once(name, fleet, tenant, receiver, rounds):
    report(name, MEASURED_RULES[name], tenant, fleet[0])
    rounds.at(0)
    rounds.at(15)
    assert states(receiver, name) == ["firing"]
    report(name, 10.0, tenant, fleet[0])
    rounds.at(30)
    rounds.at(90)
    rounds.at(105)
    assert states(receiver, name) == ["firing", "resolved"]
    [fired, _] = received(receiver, name)
    assert fired["tenant_id"] == "acme"


def test_a_silent_node_is_not_ready_once_after_two_minutes(fleet, receiver, rounds):
    rounds.silent = {fleet[0].pk}
    rounds.at(0)
    rounds.at(60)  # silent past GPUAAS_AGENT_OFFLINE_AFTER_SECONDS: down, pending
    rounds.at(179)
    assert states(receiver, "node_not_ready_warning") == []
    rounds.at(180)
    rounds.at(200)
    assert states(receiver, "node_not_ready_warning") == ["firing"]
    [fired] = received(receiver, "node_not_ready_warning")
    assert (fired["node_id"], fired["tenant_id"]) == (str(fleet[0].pk), "acme")

    rounds.silent = set()
    rounds.at(210)
    rounds.at(270)
    rounds.at(285)
    assert states(receiver, "node_not_ready_warning") == ["firing", "resolved"]
    assert states(receiver, "node_not_ready_critical") == []  # one node of the cluster


def test_two_nodes_of_a_cluster_down_is_critical_once(fleet, receiver, rounds):
    rounds.silent = {fleet[0].pk, fleet[1].pk}  # both acme's
    rounds.at(0)
    rounds.at(60)
    rounds.at(180)
    rounds.at(195)
    assert states(receiver, "node_not_ready_critical") == ["firing"]
    [fired] = received(receiver, "node_not_ready_critical")
    assert (fired["tenant_id"], fired["value"], fired["node_id"]) == ("acme", 2.0, None)
    rounds.silent = set()
    rounds.at(210)
    rounds.at(270)
    assert states(receiver, "node_not_ready_critical") == ["firing", "resolved"]


@pytest.mark.parametrize(("name", "code"), [("gpu_xid_critical", 79), ("gpu_xid_warning", 31)])
def test_an_xid_event_fires_once_and_resolves_when_the_operator_resolves_it(
    name, code, fleet, receiver, rounds
):
    node = fleet[0]
    event = monitoring.record_xid(node, 2, "GPU-x", code, rounds.start)
    rounds.at(0)
    rounds.at(15)
    assert states(receiver, name) == ["firing"]
    [fired] = received(receiver, name)
    assert (fired["gpu"], fired["value"]) == (2, code)
    assert states(receiver, "gpu_xid_warning" if name.endswith("critical") else "gpu_xid_critical") == []
    monitoring.resolve_xid(OPERATOR_CLI, event)
    rounds.at(30)
    rounds.at(90)
    assert states(receiver, name) == ["firing", "resolved"]


def test_a_condition_that_clears_before_its_for_is_never_sent(store, fleet, receiver, rounds):
    now = time.time()
    store.feed(fleet[0], readings(now - 120, now - 120, 60, gpus=1, temperature=95.0))
    rounds.at(0)
    assert Alert.objects.filter(state="pending").count() == 2  # warning and critical wait out their for
    store.feed(fleet[0], readings(*cool(), 60, gpus=1))
    rounds.at(60)
    rounds.at(400)
    assert received(receiver) == []
    assert not Alert.objects.exists()


def test_a_gpu_without_a_free_memory_reading_is_not_full(victoria, settings, fleet, receiver, rounds):
    # Scraped samples become searchable a metric at a time: for a moment VictoriaMetrics
    # can answer with a GPU's used memory and not yet its free memory.
    settings.METRICS_URL = victoria.url
    node, moment = fleet[0], int(time.time() - 5)
    used = METRICS["memory_used"].name
    victoria.import_prometheus(f'{used}{{gpu="0",UUID="GPU-x",node_id="{node.pk}"}} 1000 {moment * 1000}\n')
    wait_for(lambda: victoria.query(f'{used}{{node_id="{node.pk}"}}'), what="the used memory stored")
    rounds.at(0)
    rounds.at(15)
    assert received(receiver) == []
    assert not Alert.objects.exists()


def test_a_value_flapping_around_the_threshold_fires_and_resolves_once(fleet, tenant, receiver, rounds):
    name = "cpu_utilization_critical"
    for second, value in ((0, 95.0), (15, 50.0), (30, 96.0), (45, 40.0), (60, 97.0), (75, 30.0)):
        report(name, value, tenant, fleet[0])
        rounds.at(second)
    assert states(receiver, name) == ["firing"]
    rounds.at(119)  # a minute after the last breach, at 60 s
    assert states(receiver, name) == ["firing"]
    rounds.at(120)
    assert states(receiver, name) == ["firing", "resolved"]


def test_critical_inhibits_the_warning_on_the_same_gpu(store, fleet, receiver, rounds):
    node = fleet[0]
    now = time.time()
    store.feed(node, readings(now - 120, now - 120, 60, gpus=2, temperature=95.0))
    for second in (0, 120, 300, 400):
        rounds.at(second)
    assert states(receiver, "gpu_temperature_critical") == ["firing", "firing"]  # GPUs 0 and 1
    assert states(receiver, "gpu_temperature_warning") == []
    warning = Alert.objects.get(rule="gpu_temperature_warning", gpu=0)
    assert (warning.state, warning.inhibited) == ("pending", True)

    store.feed(node, readings(*cool(), 60, gpus=2))
    rounds.at(410)
    rounds.at(470)
    assert states(receiver, "gpu_temperature_critical") == ["firing", "firing", "resolved", "resolved"]
    assert states(receiver, "gpu_temperature_warning") == []


def test_a_down_node_inhibits_its_gpu_alerts(store, fleet, receiver, rounds):
    node = fleet[0]
    now = time.time()
    store.feed(node, readings(now - 120, now - 120, 60, gpus=1, temperature=95.0))
    rounds.silent = {node.pk}
    for second in (0, 60, 180, 300):
        rounds.at(second)
    assert states(receiver, "node_not_ready_warning") == ["firing"]
    assert states(receiver, "gpu_temperature_critical") == []
    assert Alert.objects.get(rule="gpu_temperature_critical").inhibited


def test_a_firing_gpu_alert_holds_while_its_node_is_down(store, fleet, receiver, rounds):
    """The GPU reports nothing while its node is down: that is not the GPU cooling."""
    node = fleet[0]
    now = time.time()
    store.feed(node, readings(now - 120, now - 120, 60, gpus=1, memory_used=78_000.0, memory_free=2_000.0))
    rounds.at(0)
    assert states(receiver, "gpu_memory_critical") == ["firing"], rounds.log
    rounds.silent = {node.pk}
    Node.objects.filter(pk=node.pk).update(agent_offline=True)
    store.feed(node, readings(*cool(), 60, gpus=1))
    rounds.at(60)
    rounds.at(200)
    assert states(receiver, "gpu_memory_critical") == ["firing"]


def test_a_nodes_cpu_alert_holds_while_the_node_is_down(fleet, tenant, receiver, rounds):
    """A silent agent's last CPU reading is stale: neither a new alert nor a resolution."""
    busy, quiet = fleet[0], fleet[1]
    report("cpu_utilization_critical", 97.0, tenant, busy)
    rounds.at(0)
    assert states(receiver, "cpu_utilization_critical") == ["firing"]
    rounds.silent = {busy.pk, quiet.pk}
    Node.objects.filter(pk__in=rounds.silent).update(agent_offline=True)
    report("cpu_utilization_critical", 5.0, tenant, busy)
    report("cpu_utilization_critical", 97.0, tenant, quiet)
    rounds.at(60)
    rounds.at(200)
    assert states(receiver, "cpu_utilization_critical") == ["firing"]


def test_operators_change_rules_with_alert_rule(fleet, tenant, receiver, rounds, capsys):
    call_command("alert_rule", "--list")
    listed = capsys.readouterr().out
    assert "gpu_temperature_critical\t> 90\tfor 120s\tenabled" in listed
    call_command("alert_rule", "cpu_utilization_warning", "--threshold", "85", "--for", "30")
    call_command("alert_rule", "cpu_utilization_critical", "--enabled", "false")
    report("cpu_utilization_warning", 95.0, tenant, fleet[0])
    rounds.at(0)
    rounds.at(29)
    assert received(receiver) == []
    rounds.at(30)
    assert [(b["rule"], b["threshold"]) for b in received(receiver)] == [("cpu_utilization_warning", 85.0)]

    from apps.core.models import AuditEvent

    changes = AuditEvent.objects.filter(action="alert_rule.change").order_by("occurred_at")
    assert [c.target_id for c in changes] == ["cpu_utilization_warning", "cpu_utilization_critical"]
    assert changes[0].details["after"] == {"threshold": 85.0, "for_seconds": 30, "enabled": True}


def test_alert_rule_refuses_an_unknown_rule_and_an_empty_change():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No alert rule"):
        call_command("alert_rule", "gpu_nonsense", "--threshold", "1")
    with pytest.raises(CommandError, match="Give --threshold"):
        call_command("alert_rule", "gpu_memory_warning")
