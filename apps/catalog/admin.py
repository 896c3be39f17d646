"""Operator surfaces for the catalog: flavors (GPU node SKUs), each with its fleet by state."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import format_html

from apps.allocations.models import Node
from apps.catalog.models import Flavor
from apps.core.admin import AuditedModelAdmin

State = Node.State
# Columns of the flavor list: how many nodes of the flavor are in these states.
NODE_COLUMNS = {
    "available": (State.AVAILABLE,),
    "in_use": (State.PROVISIONING, State.ALLOCATED, State.RELEASING),
    "enrolling": (State.ENROLLING,),
    "out_of_service": (State.MAINTENANCE, State.FAILED, State.OFFLINE),
}


def _node_link(flavor, count: int, states=()):
    url = reverse("admin:allocations_node_changelist") + f"?flavor__id__exact={flavor.pk}"
    if len(states) == 1:
        url += f"&state__exact={states[0]}"
    return format_html('<a href="{}">{}</a>', url, count)


@admin.register(Flavor)
class FlavorAdmin(AuditedModelAdmin):
    list_display = (
        "name",
        "gpu_model",
        "gpus_per_node",
        "rate_per_node_hour",
        "nodes_total",
        "nodes_available",
        "nodes_in_use",
        "nodes_enrolling",
        "nodes_out_of_service",
    )
    search_fields = ("name", "gpu_model")
    readonly_fields = ("id", "created_at", "updated_at")

    def get_queryset(self, request):
        counts = {
            f"count_{column}": Count("nodes", filter=Q(nodes__state__in=states))
            for column, states in NODE_COLUMNS.items()
        }
        return super().get_queryset(request).annotate(count_total=Count("nodes"), **counts)

    def get_readonly_fields(self, request, obj=None):
        # Allocations and rate cards name the flavor: fixed once created.
        return (*self.readonly_fields, "name") if obj else self.readonly_fields

    @admin.display(description="Nodes", ordering="count_total")
    def nodes_total(self, flavor):
        return _node_link(flavor, flavor.count_total)

    @admin.display(description="Available", ordering="count_available")
    def nodes_available(self, flavor):
        return _node_link(flavor, flavor.count_available, NODE_COLUMNS["available"])

    @admin.display(description="In use", ordering="count_in_use")
    def nodes_in_use(self, flavor):
        return flavor.count_in_use

    @admin.display(description="Enrolling", ordering="count_enrolling")
    def nodes_enrolling(self, flavor):
        return _node_link(flavor, flavor.count_enrolling, NODE_COLUMNS["enrolling"])

    @admin.display(description="Out of service", ordering="count_out_of_service")
    def nodes_out_of_service(self, flavor):
        return flavor.count_out_of_service
