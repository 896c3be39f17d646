"""Operator surfaces for the fleet: flavors (GPU node SKUs) with their nodes by state,
nodes (enrol, approve, maintenance, bootstrap tokens) and allocations (retry a failed
step, fail, release).

Every action calls the service with the operator's own principal, so the policy
and the audit trail are exactly those of the API. Node secrets are never
rendered: the bootstrap-token and credential hashes appear on no page, and a
freshly issued bootstrap token is shown once, on the action's own response (not
in a message, which would sit in the session or a cookie until read).
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Count, OuterRef, Q, Subquery
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html
from django.utils.timesince import timesince

from apps.allocations import nodes, selectors, services
from apps.allocations.models import Allocation, AllocationStep, Node
from apps.catalog.models import Flavor
from apps.core.admin import AuditedModelAdmin, ReadOnlyInline, ReadOnlyModelAdmin, confirmation_page
from apps.tenancy.admin import apply_as_operator, apply_as_operator_with_reason

# --- Flavors ------------------------------------------------------------------------------------

# Columns of the flavor list: how many nodes of the flavor are in these states.
NODE_COLUMNS = {
    "available": (Node.State.AVAILABLE,),
    "in_use": (Node.State.PROVISIONING, Node.State.ALLOCATED, Node.State.RELEASING),
    "enrolling": (Node.State.ENROLLING,),
    "out_of_service": (Node.State.MAINTENANCE, Node.State.FAILED, Node.State.OFFLINE),
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


class FleetMedia:
    css = {"all": ("allocations/admin.css",)}


def _badge(kind: str, value: str, label: str):
    return format_html('<span class="fleet-badge fleet-{}-{}">{}</span>', kind, value.lower(), label)


# --- Nodes ------------------------------------------------------------------------------------


class NodeForm(forms.ModelForm):
    """What an operator types in when adding a host; its lifecycle fields are the services'."""

    class Meta:
        model = Node
        fields = (
            "hostname",
            "flavor",
            "rack",
            "bmc_address",
            "maas_system_id",
            "ib_guid",
            "switch_serial",
            "switch_port",
            "bootstrap_token_hours",
        )


LIFECYCLE_FIELDS = (
    "state_badge",
    "state_reason",
    "approved",
    "enrollment",
    "agent_address",
    "enrolled_at",
    "last_heartbeat_at",
    "current_allocation",
    "allocation_history",
    "created_at",
    "updated_at",
)


@admin.register(Node)
class NodeAdmin(AuditedModelAdmin):
    """Added here in state ``enrolling``, not approved; the agent enrols with a
    bootstrap token, an operator approves, and the node joins the pool."""

    form = NodeForm
    list_display = (
        "hostname",
        "flavor",
        "state_badge",
        "approved",
        "rack",
        "last_heartbeat_at",
        "current_tenant",
        "current_project",
    )
    list_filter = ("state", "flavor", "approved", "agent_offline", "rack")
    search_fields = ("hostname", "maas_system_id")
    list_select_related = ("flavor",)
    list_per_page = 100
    readonly_fields = LIFECYCLE_FIELDS
    actions = ("approve", "put_in_maintenance", "return_to_service", "issue_bootstrap_token")
    Media = FleetMedia

    def get_queryset(self, request):
        live = Allocation.objects.filter(node=OuterRef("pk"), state__in=Allocation.LIVE_STATES)
        return (
            super()
            .get_queryset(request)
            .annotate(
                live_allocation_id=Subquery(live.values("pk")[:1]),
                live_tenant=Subquery(live.values("tenant__tenant_id")[:1]),
                live_project=Subquery(live.values("project__project_id")[:1]),
            )
        )

    def get_fieldsets(self, request, obj=None):
        hardware = (
            ("Host", {"fields": ("hostname", "flavor", "rack", "bmc_address", "maas_system_id")}),
            ("Fabric", {"fields": ("ib_guid", "switch_serial", "switch_port")}),
            ("Agent enrollment", {"fields": ("bootstrap_token_hours",)}),
        )
        if obj is None:
            return hardware
        return (*hardware, ("Lifecycle", {"fields": LIFECYCLE_FIELDS}))

    def get_readonly_fields(self, request, obj=None):
        # The agent, MAAS and the fabric know the host by its name; its flavor is what tenants were sold.
        return (*LIFECYCLE_FIELDS, "hostname", "flavor") if obj else LIFECYCLE_FIELDS

    @admin.display(description="State", ordering="state")
    def state_badge(self, node):
        return _badge("node", node.state, node.get_state_display())

    @admin.display(description="Tenant", ordering="live_tenant")
    def current_tenant(self, node):
        return getattr(node, "live_tenant", None) or "-"

    @admin.display(description="Project", ordering="live_project")
    def current_project(self, node):
        return getattr(node, "live_project", None) or "-"

    @admin.display(description="Agent enrollment")
    def enrollment(self, node):
        # Said in words: the hashes themselves are never rendered.
        return nodes.bootstrap_token_state(node)

    @admin.display(description="Current allocation")
    def current_allocation(self, node):
        allocation_id = getattr(node, "live_allocation_id", None)
        if allocation_id is None:
            return "-"
        url = reverse("admin:allocations_allocation_change", args=[allocation_id])
        return format_html(
            '<a href="{}">{} ({} / {})</a>', url, str(allocation_id)[:8], node.live_tenant, node.live_project
        )

    @admin.display(description="Allocations")
    def allocation_history(self, node):
        url = reverse("admin:allocations_allocation_changelist") + f"?node__id__exact={node.pk}"
        return format_html('<a href="{}">all allocations of this node</a>', url)

    # Actions: each calls nodes.* with the operator's principal (policy + audit there).

    @admin.action(description="Approve selected nodes", permissions=["change"])
    def approve(self, request, queryset):
        pending = [node for node in queryset if not node.approved]
        already = len(queryset) - len(pending)
        if already:
            self.message_user(request, f"{already} selected node(s) were already approved.", messages.INFO)
        apply_as_operator(self, request, pending, nodes.approve, done="Approved")

    @admin.action(description="Put selected nodes in maintenance", permissions=["change"])
    def put_in_maintenance(self, request, queryset):
        return apply_as_operator_with_reason(
            self,
            request,
            queryset,
            nodes.set_maintenance,
            action="put_in_maintenance",
            title="Put nodes in maintenance",
            intro="These nodes leave the scheduling pool until an operator returns them to service. "
            "A node an allocation holds is refused: release it first.",
            submit="Put in maintenance",
            done="Put in maintenance",
        )

    @admin.action(description="Return selected nodes to service", permissions=["change"])
    def return_to_service(self, request, queryset):
        apply_as_operator(self, request, queryset, nodes.return_to_service, done="Returned to service")

    @admin.action(description="Issue a bootstrap token for selected nodes", permissions=["change"])
    def issue_bootstrap_token(self, request, queryset):
        if "apply" not in request.POST:
            return confirmation_page(
                self,
                request,
                queryset,
                action="issue_bootstrap_token",
                title="Issue bootstrap tokens",
                intro="A new one-time token replaces any unused one. The next page shows each token once; "
                "it is not stored in clear and cannot be shown again.",
                submit="Issue tokens",
            )
        issued = []

        def issue(operator, node):
            issued.append((node, nodes.issue_bootstrap_token(node, principal=operator)))

        apply_as_operator(self, request, queryset, issue, done="Issued a bootstrap token for")
        if not issued:
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Bootstrap tokens",
            "opts": self.model._meta,
            "issued": issued,
            "platform_url": settings.ISSUER,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        response = TemplateResponse(request, "admin/allocations/node/bootstrap_tokens.html", context)
        add_never_cache_headers(response)  # no-store: a back button or a proxy must not replay the tokens
        return response


# --- Allocations ------------------------------------------------------------------------------


class AllocationStepInline(ReadOnlyInline):
    """The pipeline's steps, as the workers left them."""

    model = AllocationStep
    fields = ("phase", "position", "name", "status", "attempts", "started_at", "finished_at", "error")
    readonly_fields = fields
    ordering = ("phase", "position")


def _allocation_label(allocation: Allocation) -> str:
    return f"allocation {str(allocation.pk)[:8]} on {allocation.node.hostname}"


class StuckFilter(admin.SimpleListFilter):
    """The allocations no worker is moving (what the operations page counts as stuck)."""

    title = "stuck"
    parameter_name = "stuck"

    def lookups(self, request, model_admin):
        return (("yes", "Stuck"),)

    def queryset(self, request, queryset):
        return queryset.filter(selectors.stuck()) if self.value() == "yes" else queryset


ALLOCATION_FIELDS = (
    "id",
    "node",
    "tenant",
    "project",
    "flavor",
    "gpus",
    "os_image",
    "network_id",
    "state",
    "step",
    "progress",
    "failure_reason",
    "requested_by",
    "drain",
    "erase_disk",
    "abort_requested",
    "compensating",
    "hardware_fault",
    "lease_until",
    "next_check_at",
    "activated_at",
    "finished_at",
    "created_at",
    "updated_at",
)


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyModelAdmin):
    """Read-only: operators change an allocation only through its actions (the pipeline owns its state)."""

    list_display = ("short_id", "node", "tenant", "project", "state_badge", "step", "progress_percent", "age")
    list_filter = ("state", StuckFilter, "flavor", "tenant", "compensating", "hardware_fault")
    search_fields = ("id", "node__hostname")
    search_help_text = "Allocation id (or its start) or node hostname."
    list_select_related = ("node", "tenant", "project__tenant")
    list_per_page = 100
    fieldsets = (
        (None, {"fields": ALLOCATION_FIELDS[:8]}),
        ("Pipeline", {"fields": ALLOCATION_FIELDS[8:19]}),
        ("Timestamps", {"fields": ALLOCATION_FIELDS[19:]}),
    )
    readonly_fields = ALLOCATION_FIELDS
    inlines = (AllocationStepInline,)
    actions = ("retry_failed_step", "fail_allocation", "release")
    Media = FleetMedia

    @admin.display(description="Allocation", ordering="id")
    def short_id(self, allocation):
        return str(allocation.pk)[:8]

    @admin.display(description="State", ordering="state")
    def state_badge(self, allocation):
        return _badge("allocation", allocation.state, allocation.get_state_display())

    @admin.display(description="Progress", ordering="progress")
    def progress_percent(self, allocation):
        return f"{allocation.progress}%"

    @admin.display(description="Age", ordering="created_at")
    def age(self, allocation):
        return timesince(allocation.created_at, timezone.now(), depth=1)

    # Actions: each calls allocations.services with the operator's principal.

    @admin.action(description="Retry the failed step of selected allocations", permissions=["operate"])
    def retry_failed_step(self, request, queryset):
        apply_as_operator(
            self,
            request,
            queryset.select_related("node"),
            services.retry_failed_step,
            done="Retrying the failed step of",
            label=_allocation_label,
        )

    @admin.action(description="Fail selected allocations (stop provisioning)", permissions=["operate"])
    def fail_allocation(self, request, queryset):
        return apply_as_operator_with_reason(
            self,
            request,
            queryset.select_related("node"),
            services.fail_allocation,
            action="fail_allocation",
            title="Fail allocations",
            intro="Provisioning stops and what the allocation took is given back. "
            "Only pending or provisioning allocations can be failed.",
            submit="Fail allocations",
            done="Failed",
            label=_allocation_label,
        )

    @admin.action(description="Release selected allocations", permissions=["operate"])
    def release(self, request, queryset):
        released = (Allocation.State.RELEASING, Allocation.State.RELEASED)
        apply_as_operator(
            self,
            request,
            queryset.select_related("node"),
            services.release,
            done="Release requested for",
            label=_allocation_label,
            already=(lambda allocation: allocation.state in released, "Already released or releasing"),
        )
