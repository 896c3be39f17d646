"""Which agents are taken for dead: those silent while the platform was listening.
After the platform's own outage (its database, Redis or worker down, so beat's sweep
did not run) every agent gets the whole ``AGENT_OFFLINE_AFTER_SECONDS`` to reach it
again before its node is marked offline and its instances failed. An agent that comes
back takes its instances back, when the GPUs they gave back are still free."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.allocations.models import Node
from apps.core.models import AuditEvent
from apps.runtime import agents
from apps.runtime.models import AgentTask, AppInstance
from apps.runtime.states import member_failed
from tests.support.fleet import make_nodes
from tests.support.instances import fill

pytestmark = pytest.mark.django_db


def _sweeps(start, seconds: int, every: int = 15) -> list[int]:
    """Beat's sweep every ``every`` seconds over ``seconds``: how many nodes each marked."""
    return [
        agents.mark_silent_nodes_offline(now=start + timedelta(seconds=s)) for s in range(0, seconds, every)
    ]


def _enrolled(flavor, heard_at) -> tuple[Node, Node]:
    alive, dead = make_nodes(flavor, 2)
    Node.objects.filter(pk__in=[alive.pk, dead.pk]).update(
        enrolled_at=heard_at, credential_hash="x", last_heartbeat_at=heard_at
    )
    return alive, dead


def test_an_agent_silent_while_the_platform_listens_goes_offline(flavor):
    start = timezone.now()
    alive, dead = _enrolled(flavor, start)
    marked = []
    for second in range(0, 120, 15):
        Node.objects.filter(pk=alive.pk).update(last_heartbeat_at=start + timedelta(seconds=second))
        marked.append(agents.mark_silent_nodes_offline(now=start + timedelta(seconds=second)))
    assert sum(marked) == 1
    assert Node.objects.get(pk=dead.pk).agent_offline
    assert not Node.objects.get(pk=alive.pk).agent_offline


def test_after_the_platforms_own_outage_agents_get_time_to_come_back(flavor):
    start = timezone.now()
    alive, dead = _enrolled(flavor, start)
    _sweeps(start, 30)  # listening, both heard at the start
    back = start + timedelta(minutes=2)  # no sweep ran, no heartbeat arrived: the platform was down

    assert agents.mark_silent_nodes_offline(now=back) == 0
    # The living agent's retry (backing off up to 30 s) reaches it; the dead one never does.
    Node.objects.filter(pk=alive.pk).update(last_heartbeat_at=back + timedelta(seconds=25))
    assert _sweeps(back + timedelta(seconds=15), 30) == [0, 0]
    assert _sweeps(back + timedelta(seconds=45), 30) == [1, 0]
    assert Node.objects.get(pk=dead.pk).agent_offline
    assert not Node.objects.get(pk=alive.pk).agent_offline


@pytest.fixture
def silent_node(active_allocation):
    """The allocation's node, marked offline by the silence sweep."""
    node = active_allocation.node
    Node.objects.filter(pk=node.pk).update(agent_offline=True)
    return node


def _failed_while_silent(instance, node) -> None:
    member_failed(instance, node, f"node agent on {node.hostname} offline", kind="node_offline")


def test_an_instance_still_running_when_its_agent_is_back_runs_again(
    allocator, active_allocation, silent_node, vllm
):
    instance = fill(allocator, active_allocation, "big-1")
    _failed_while_silent(instance, silent_node)

    agents.heartbeat(silent_node, running=[str(instance.pk)])

    instance.refresh_from_db()
    assert instance.state == AppInstance.State.RUNNING


def test_an_instance_whose_gpus_were_taken_while_its_agent_was_silent_is_stopped(
    allocator, active_allocation, silent_node, vllm
):
    """Failing gave its GPUs back; another launch took them. Taking it back as running
    would put two apps on the same GPUs: its workload is stopped instead."""
    first = fill(allocator, active_allocation, "big-1")
    _failed_while_silent(first, silent_node)
    second = fill(allocator, active_allocation, "big-2")

    agents.heartbeat(silent_node, running=[str(first.pk), str(second.pk)])

    first.refresh_from_db()
    second.refresh_from_db()
    assert second.state == AppInstance.State.RUNNING
    assert first.state == AppInstance.State.STOPPING
    assert "GPU" in first.state_reason, first.state_reason
    assert AuditEvent.objects.filter(action="instance.stop", target_id=str(first.pk), actor="platform")
    [stop] = AgentTask.objects.filter(instance=first, status=AgentTask.Status.PENDING)
    assert stop.action == AgentTask.Action.STOP
