"""An alert about a node is the tenant's that held the node when it fired. When the
node changes hands while the alert is open, the alert ends for its tenant, and the
condition, if it goes on, is the new holder's own alert: the previous tenant is not
told about the next one's workload, and the next one is not left unalerted."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.allocations.models import Allocation
from apps.monitoring.alerts import services
from tests.monitoring.alerting import received
from tests.support.fleet import made_allocation

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("shipped_alert_rules")]
RULE = "cpu_utilization_critical"


def busy(node) -> None:
    services.record_measurement("cpu_utilization", str(node.pk), 99.0, node=node, label=node.hostname)


def sent(receiver) -> list[tuple[str, str]]:
    return [(body["tenant_id"], body["state"]) for body in received(receiver, RULE)]


def test_an_open_alert_ends_for_its_tenant_when_the_node_goes_to_another(
    fleet, other_tenant_project, flavor, receiver, rounds
):
    node = fleet[0]  # acme's
    busy(node)
    rounds.at(0)
    rounds.at(15)
    assert sent(receiver) == [("acme", "firing")]

    # acme releases the node while it is still busy; globex gets it and keeps it busy.
    Allocation.objects.filter(node=node).update(state=Allocation.State.RELEASED, finished_at=timezone.now())
    made_allocation(other_tenant_project, node, flavor, timezone.now(), state=Allocation.State.ACTIVE)
    busy(node)
    rounds.at(30)
    rounds.at(45)
    assert sent(receiver) == [("acme", "firing"), ("acme", "resolved"), ("globex", "firing")]
