"""One evaluation round of every enabled rule, and the alert state machine.

For each rule, the subjects whose value is above its threshold (breaching):
- a breaching subject without an open alert opens one, ``pending``;
- a pending alert whose subject has breached for the rule's ``for`` fires (sent once);
- a pending alert whose subject stops breaching is dropped (never sent);
- a firing alert resolves (sent once) when its subject has not breached for
  ``GPUAAS_ALERT_RESOLVE_AFTER_SECONDS``: a value bouncing around the threshold does
  not fire and resolve over and over (flap damping).
- an alert about a node ends (resolves now, or is dropped while pending) once another
  allocation, or none, holds the node: it was its tenant's, and what the node does
  next is the next holder's own alert.
Inhibition: a warning does not fire while the critical rule of the same metric
breaches on the same subject, and a GPU's alerts neither fire nor resolve while its
node is down (the node's own alert says what happened; its GPUs report nothing).

Rounds are serialised by a lease on the ``AlertEvaluator`` row, and each transition
is a conditional UPDATE from the state it was read in, so a round that overlaps
another (a lost lease) still sends every transition once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.allocations.models import Allocation, Node
from apps.monitoring.alerts import delivery, rules
from apps.monitoring.alerts.rules import Observation
from apps.monitoring.models import Alert, AlertEvaluator, AlertRule, AlertSubscription
from apps.tenancy.models import Project, Tenant

logger = logging.getLogger(__name__)
State = Alert.State
# Long enough for a round over the whole fleet; a worker that died holding it is
# replaced after this.
LEASE_SECONDS = 60


@dataclass
class Round:
    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Holding:
    hostname: str
    allocation_id: object = None
    tenant_id: object = None
    project_id: object = None


def evaluate(now: datetime | None = None) -> Round | None:
    """One round, or None when another worker holds the evaluator's lease."""
    now = now or timezone.now()
    until = _take_lease(now)
    if until is None:
        return None
    started = time.monotonic()
    result = Round()
    try:
        _round(now, result)
    finally:
        result.seconds = time.monotonic() - started
        AlertEvaluator.objects.filter(pk=1, lease_until=until).update(
            lease_until=None, last_round_at=now, last_round_seconds=result.seconds
        )
    return result


def _take_lease(now: datetime) -> datetime | None:
    AlertEvaluator.objects.get_or_create(pk=1)
    until = now + timedelta(seconds=LEASE_SECONDS)
    free = AlertEvaluator.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=timezone.now()), pk=1
    )
    return until if free.update(lease_until=until) else None


@dataclass
class Context:
    """What one round reads once and every rule uses."""

    now: datetime
    result: Round
    holdings: dict[str, Holding]
    down: set[str]
    tenants: dict
    projects: dict
    receivers: list[AlertSubscription]
    # Each rule's open alerts, read once for the round: a rule's step changes only its own.
    open_alerts: dict[str, list[Alert]]


def _round(now: datetime, result: Round) -> None:
    enabled = list(AlertRule.objects.filter(enabled=True))
    holdings = _holdings()
    open_alerts: dict[str, list[Alert]] = {}
    for alert in Alert.objects.filter(rule__in=enabled, state__in=Alert.OPEN):
        open_alerts.setdefault(alert.rule_id, []).append(alert)
    context = Context(
        now,
        result,
        holdings,
        rules.down_nodes(now),
        Tenant.objects.only("pk", "tenant_id").in_bulk(),
        Project.objects.only("pk", "project_id", "tenant_id").in_bulk(),
        list(AlertSubscription.objects.all()),
        open_alerts,
    )
    # Critical first: a warning needs to know where its critical rule breaches.
    enabled.sort(key=lambda rule: (rule.metric, rule.severity != AlertRule.Severity.CRITICAL))
    lowest: dict[str, float] = {}
    for rule in enabled:
        lowest[rule.metric] = min(rule.threshold, lowest.get(rule.metric, rule.threshold))
    observations: dict[str, list[Observation]] = {}
    critical: dict[str, set[str]] = {}
    for rule in enabled:
        if rule.metric not in observations:
            # A metrics database may still hold series of nodes the platform no longer has.
            observations[rule.metric] = [
                o
                for o in rules.collect(rule.metric, now, lowest[rule.metric])
                if o.node_id is None or str(o.node_id) in holdings
            ]
        seen = observations[rule.metric]
        if rule.name == rules.CLUSTER_RULE:
            seen = rules.by_cluster(seen, lambda node_id: _tenant_of(holdings, node_id))
        breaching = {
            o.subject: o
            for o in seen
            if rules.breaches(rule.metric, o.value, rule.threshold)
            and (o.severity is None or o.severity == rule.severity)
        }
        held_back = critical.get(rule.metric, set()) if rule.severity == AlertRule.Severity.WARNING else set()
        if rule.severity == AlertRule.Severity.CRITICAL:
            critical[rule.metric] = set(breaching)
        _advance(rule, breaching, held_back, rule.metric in rules.NODE_BOUND, context)


def _holdings() -> dict[str, Holding]:
    """Every node's hostname and, while an allocation holds it, whose it is."""
    found = {str(pk): Holding(hostname) for pk, hostname in Node.objects.values_list("pk", "hostname")}
    for node_id, allocation_id, tenant_id, project_id in Allocation.objects.filter(
        state=Allocation.State.ACTIVE
    ).values_list("node_id", "pk", "tenant_id", "project_id"):
        holding = found.get(str(node_id))
        if holding is not None:
            holding.allocation_id, holding.tenant_id, holding.project_id = (
                allocation_id,
                tenant_id,
                project_id,
            )
    return found


def _tenant_of(holdings: dict[str, Holding], node_id) -> object:
    holding = holdings.get(str(node_id))
    return holding.tenant_id if holding else None


def _advance(rule, breaching, held_back, node_bound: bool, context: Context) -> None:
    now = context.now
    open_alerts = _still_open(rule, context)
    new = [_opened(rule, o, now, context.holdings) for s, o in breaching.items() if s not in open_alerts]
    if new:
        Alert.objects.bulk_create(new, ignore_conflicts=True)
        open_alerts.update({a.subject: a for a in new})
    breached, inhibited_now, free_now = [], [], []
    for subject, alert in open_alerts.items():
        # The round's own copies: the payloads name tenants and projects without a query each.
        alert.tenant, alert.project = (
            context.tenants.get(alert.tenant_id),
            context.projects.get(alert.project_id),
        )
        observation = breaching.get(subject)
        node_down = node_bound and alert.node_id is not None and str(alert.node_id) in context.down
        inhibited = node_down or subject in held_back
        if observation is not None:
            # Saved below, a few UPDATEs for the whole rule; the value as it was when it fired.
            alert.value, alert.last_breach_at = observation.value, now
            breached.append(alert.pk)
            if inhibited != alert.inhibited:
                alert.inhibited = inhibited
                (inhibited_now if inhibited else free_now).append(alert.pk)
            due = (now - alert.pending_since).total_seconds() >= rule.for_seconds
            if alert.state == State.PENDING and due and not inhibited and _fire(alert, context):
                context.result.fired.append(alert)
        elif alert.state == State.PENDING:
            Alert.objects.filter(pk=alert.pk, state=State.PENDING).delete()
        elif not node_down:
            quiet = (now - alert.last_breach_at).total_seconds() >= settings.ALERT_RESOLVE_AFTER_SECONDS
            if quiet and _resolve(alert, context):
                context.result.resolved.append(alert)
    for pks, values in (
        (breached, {"last_breach_at": now}),
        (inhibited_now, {"inhibited": True}),
        (free_now, {"inhibited": False}),
    ):
        if pks:
            Alert.objects.filter(pk__in=pks).update(**values)


def _still_open(rule: AlertRule, context: Context) -> dict[str, Alert]:
    """The rule's open alerts by subject, once those whose node changed hands are ended:
    each was its tenant's, and what the node does now is the next holder's."""
    open_alerts = {}
    for alert in context.open_alerts.get(rule.pk, []):
        if _changed_hands(alert, context.holdings):
            _end(alert, context)
        else:
            open_alerts[alert.subject] = alert
    return open_alerts


def _changed_hands(alert: Alert, holdings: dict[str, Holding]) -> bool:
    """Whether the alert's node is held by another allocation (or none) than when it opened."""
    if alert.node_id is None:
        return False
    holding = holdings.get(str(alert.node_id))
    return holding is not None and holding.allocation_id != alert.allocation_id


def _end(alert: Alert, context: Context) -> None:
    """A pending alert is dropped (never sent); a firing one resolves now."""
    if alert.state == State.PENDING:
        Alert.objects.filter(pk=alert.pk, state=State.PENDING).delete()
        return
    alert.tenant, alert.project = context.tenants.get(alert.tenant_id), context.projects.get(alert.project_id)
    if _resolve(alert, context):
        context.result.resolved.append(alert)


def _opened(rule: AlertRule, observation: Observation, now: datetime, holdings) -> Alert:
    holding = holdings.get(str(observation.node_id)) if observation.node_id else None
    info = rules.METRICS[rule.metric]
    where = f"{observation.label} on {holding.hostname}" if holding else observation.label
    return Alert(
        rule=rule,
        subject=observation.subject,
        severity=rule.severity,
        tenant_id=holding.tenant_id if holding else observation.tenant_id,
        project_id=holding.project_id if holding else None,
        allocation_id=holding.allocation_id if holding else None,
        node_id=observation.node_id,
        hostname=holding.hostname if holding else "",
        gpu=observation.gpu,
        value=observation.value,
        threshold=rule.threshold,
        summary=_summary(rule, info, where),
        pending_since=now,
        last_breach_at=now,
    )


def _fire(alert: Alert, context: Context) -> bool:
    now = context.now
    with transaction.atomic():
        if not Alert.objects.filter(pk=alert.pk, state=State.PENDING).update(
            state=State.FIRING, started_at=now, value=alert.value, inhibited=False, updated_at=now
        ):
            return False  # another round fired it
        alert.state, alert.started_at = State.FIRING, now
        delivery.send(alert, context.receivers)
    logger.info("alert %s fired: %s", alert.pk, alert.summary)
    return True


def _resolve(alert: Alert, context: Context) -> bool:
    now = context.now
    with transaction.atomic():
        if not Alert.objects.filter(pk=alert.pk, state=State.FIRING).update(
            state=State.RESOLVED, resolved_at=now, updated_at=now
        ):
            return False
        alert.state, alert.resolved_at = State.RESOLVED, now
        delivery.send(alert, context.receivers)
    logger.info("alert %s resolved: %s", alert.pk, alert.summary)
    return True


def _summary(rule: AlertRule, info: rules.MetricInfo, where: str) -> str:
    relation = "at or above" if info.at_threshold else "above"
    summary = f"{rule.severity.capitalize()}: {info.noun} of {where} {relation} {rule.threshold:g}{info.unit}"
    return summary[:300]
