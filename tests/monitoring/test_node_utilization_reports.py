"""Agents report their node's CPU and memory utilization with their telemetry: the
platform keeps each as the node's measurement for the alert rules on it, refuses
values outside 0..100, and still takes reports from agents that send neither."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from apps.monitoring.models import Measurement

pytestmark = pytest.mark.django_db


def measured(node) -> dict:
    return {
        m.metric: (m.subject, m.label, m.value)
        for m in Measurement.objects.filter(node=node, metric__in=("cpu_utilization", "memory_utilization"))
    }


def test_the_nodes_readings_become_its_measurements(agent):
    node = agent.node
    assert agent({"cpu_utilization": 42.5, "memory_utilization": 61.0}).status_code == 200
    assert agent({"cpu_utilization": 77.0}).status_code == 200  # the latest one counts
    assert measured(node) == {
        "cpu_utilization": (str(node.pk), node.hostname, 77.0),
        "memory_utilization": (str(node.pk), node.hostname, 61.0),
    }


def test_an_agent_without_the_readings_still_reports(agent):
    assert agent({"readings": [], "xids": []}).status_code == 200
    assert measured(agent.node) == {}


@pytest.mark.parametrize(
    ("field", "value"), [("cpu_utilization", 100.5), ("memory_utilization", -1), ("cpu_utilization", "busy")]
)
def test_a_reading_outside_a_percentage_is_refused_and_nothing_recorded(agent, field, value):
    response = agent({"cpu_utilization": 50.0, "memory_utilization": 50.0, field: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], field in error["details"]) == ("validation_error", True)
    assert measured(agent.node) == {}


def test_simulated_agents_are_answered_the_node_readings_simulate_gpu_holds(agent):
    call_command("simulate_gpu", agent.node.hostname, "--cpu", "88", "--node-memory", "71")
    call_command("simulate_gpu", agent.node.hostname, "--gpu", "1", "--temperature", "90")
    held = agent({"simulated": True}).json()["held"]
    assert held == {"node": {"cpu_utilization": 88.0, "memory_utilization": 71.0}, "1": {"temperature": 90.0}}
    call_command("simulate_gpu", agent.node.hostname, "--clear")
    assert agent({"simulated": True}).json()["held"] == {}
