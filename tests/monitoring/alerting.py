"""What the alert tests share: a fleet held by tenants, evaluation rounds at chosen
moments (the agents heartbeating up to them), and the alerts CCP received."""

from __future__ import annotations

import json
from datetime import timedelta

from django.utils import timezone

from apps.allocations.models import Allocation, Node
from apps.monitoring.alerts import evaluation
from apps.monitoring.models import Alert
from tests.support.fleet import made_allocation, make_nodes


def held_fleet(project, other_tenant_project, flavor, count: int = 3) -> list[Node]:
    """``count`` enrolled nodes: all but the last held by ``project``'s tenant (acme),
    the last by globex."""
    machines = make_nodes(flavor, count, prefix="alert")
    since = timezone.now() - timedelta(hours=1)
    for index, node in enumerate(machines):
        owner = other_tenant_project if index == count - 1 else project
        made_allocation(owner, node, flavor, since, state=Allocation.State.ACTIVE)
    Node.objects.filter(pk__in=[n.pk for n in machines]).update(
        credential_hash="0" * 64, enrolled_at=since, last_heartbeat_at=timezone.now()
    )
    return machines


class Rounds:
    """Evaluation rounds at moments the test picks, from ``start`` on. Before each
    one, every enrolled agent but the ``silent`` ones has heartbeaten at that moment."""

    def __init__(self, capture):
        self.capture = capture
        self.start = timezone.now()
        self.silent: set = set()
        # What each round did and left open, for a failing assertion to show: a pending
        # alert that started again missed a reading; one that fired and never arrived
        # was lost in delivery.
        self.log: list[str] = []

    def at(self, seconds: float):
        moment = self.start + timedelta(seconds=seconds)
        Node.objects.filter(enrolled_at__isnull=False).exclude(pk__in=self.silent).update(
            last_heartbeat_at=moment
        )
        with self.capture(execute=True):
            result = evaluation.evaluate(moment)
        # A round that did not run would shift every "for" the test counts.
        assert result is not None, f"another evaluator held the lease at {seconds} s"
        open_alerts = [
            f"{rule} {subject} {state} since {(since - self.start).total_seconds():+.0f} s"
            for rule, subject, state, since in Alert.objects.filter(state__in=Alert.OPEN).values_list(
                "rule__name", "subject", "state", "pending_since"
            )
        ]
        self.log.append(
            f"at {seconds} s: fired {[a.rule.name for a in result.fired]}, "
            f"resolved {[a.rule.name for a in result.resolved]}, open {open_alerts}"
        )
        return result


def received(receiver, rule: str | None = None) -> list[dict]:
    """The alert webhooks CCP received (of one rule), in order, each event once: delivery
    is at least once and receivers dedupe on ``event_id`` (CONTRACT), so an attempt
    that timed out on a loaded machine and was sent again is one event."""
    bodies = [json.loads(r["body"]) for r in receiver.requests if r["path"] == "/ccp/webhooks/alerts"]
    firsts = {}
    for body in bodies:
        firsts.setdefault(body["event_id"], body)
    return [b for b in firsts.values() if rule is None or b["rule"] == rule]


def states(receiver, rule: str) -> list[str]:
    return [b["state"] for b in received(receiver, rule)]
