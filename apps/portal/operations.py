"""The operators' front page: the admin index, branded "GPUaaS operations", with
what needs an operator across the fleet (nodes by flavor and state, offline
agents, failed and stuck allocations, dead letters, firing alerts) and the fleet
charts, each count linking to the admin list it counts.

It reads allocations, webhooks and monitoring together, so it lives in the
portal, the top layer, and reads each app through its selectors. A panel is
shown only to an operator who may view the model it counts; the page costs a
fixed number of queries whatever the size of the fleet.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin
from django.urls import reverse

from apps.allocations import selectors as allocations
from apps.allocations.models import Allocation, Node
from apps.monitoring import fleet
from apps.monitoring.models import Alert, XidEvent
from apps.webhooks import selectors as webhooks
from apps.webhooks.models import Delivery

# The columns of the nodes table, in the order a node lives through them.
NODE_STATES = [
    Node.State.AVAILABLE,
    Node.State.ALLOCATED,
    Node.State.PROVISIONING,
    Node.State.RELEASING,
    Node.State.ENROLLING,
    Node.State.MAINTENANCE,
    Node.State.FAILED,
    Node.State.OFFLINE,
]


def _changelist(model, **filters) -> str:
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def _may_view(request, model) -> bool:
    return request.user.has_perm(f"{model._meta.app_label}.view_{model._meta.model_name}")


def _node_table() -> dict:
    rows: dict = {}
    for cell in allocations.nodes_by_flavor_and_state():
        url = _changelist(Node, flavor__id__exact=cell["flavor_id"])
        row = rows.setdefault(cell["flavor_id"], {"flavor": cell["flavor"], "url": url, "total": 0})
        row[cell["state"]] = cell["count"]
        row["total"] += cell["count"]
    table = []
    for flavor_id, row in rows.items():
        cells = [
            {
                "count": row.get(state, 0),
                "url": _changelist(Node, flavor__id__exact=flavor_id, state__exact=state),
            }
            for state in NODE_STATES
        ]
        table.append({**row, "cells": cells})
    return {
        "states": [
            {"label": state.label, "url": _changelist(Node, state__exact=state)} for state in NODE_STATES
        ],
        "rows": table,
    }


def attention(request) -> list[dict]:
    """The counts an operator acts on, each with the admin list it counts."""
    found = []
    if _may_view(request, Node):
        found.append(
            {
                "key": "agents_offline",
                "label": "Offline agents",
                "count": allocations.agents_offline(),
                "url": _changelist(Node, agent_offline__exact=1),
            }
        )
    if _may_view(request, Allocation):
        troubled = allocations.troubled_allocations()
        found += [
            {
                "key": "failed_allocations",
                "label": "Failed allocations",
                "count": troubled["failed"],
                "url": _changelist(Allocation, state__exact=Allocation.State.FAILED),
            },
            {
                "key": "stuck_allocations",
                "label": "Stuck allocations",
                "count": troubled["stuck"],
                "url": _changelist(Allocation, stuck="yes"),
            },
        ]
    if _may_view(request, Delivery):
        found.append(
            {
                "key": "dead_letters",
                "label": "Dead letters",
                "count": webhooks.dead_letter_count(),
                "url": _changelist(Delivery, status=Delivery.Status.DEAD),
            }
        )
    if _may_view(request, Alert):
        found.append(
            {
                "key": "firing_alerts",
                "label": "Firing alerts",
                "count": fleet.firing_alert_count(),
                "url": _changelist(Alert, state__exact=Alert.State.FIRING),
            }
        )
    return found


def overview(request) -> dict:
    context = {"attention": attention(request)}
    if _may_view(request, Node):
        context["nodes"] = _node_table()
        temperature = fleet.temperature_bands()
        context["temperature"] = temperature
        context["temperature_chart"] = {
            "unit": "GPUs",
            "labels": [band["label"] for band in temperature["bands"]],
            "values": [band["gpus"] for band in temperature["bands"]],
        }
    if _may_view(request, XidEvent):
        xids = fleet.open_xid_counts()
        for row in xids:
            row["url"] = _changelist(XidEvent, code__exact=row["code"], resolved_at__isempty=1)
        context["xids"] = xids
        context["xid_url"] = _changelist(XidEvent, resolved_at__isempty=1)
        context["xid_chart"] = {
            "unit": "GPUs",
            "labels": [f"XID {row['code']}" for row in xids],
            "values": [row["gpus"] for row in xids],
        }
    return context


class OperationsAdminSite(admin.AdminSite):
    site_header = "GPUaaS operations"
    site_title = "GPUaaS operations"
    index_title = "Operations"
    index_template = "admin/operations/index.html"

    def index(self, request, extra_context=None):
        return super().index(request, {**overview(request), **(extra_context or {})})
