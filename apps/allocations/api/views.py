from __future__ import annotations

from dataclasses import asdict

from django.db.models import Count, Q
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.response import Response

from apps.allocations import services
from apps.allocations.api import serializers as s
from apps.allocations.filters import AllocationFilter
from apps.allocations.models import Allocation, Node
from apps.catalog.models import Flavor
from apps.core.idempotency import idempotent
from apps.core.schema import QUOTA_EXCEEDED
from apps.tenancy import policy
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView, FilteredListAPIView, validated
from apps.tenancy.api.views import ProjectScopedMixin
from apps.tenancy.models import Project
from apps.tenancy.roles import Perm


def _plan_body(plan) -> dict:
    return {"dry_run": True, **{k: v for k, v in asdict(plan).items() if k != "exceeded"}}


def _status_body(allocations: list[Allocation]) -> dict:
    rows = s.AllocationStatusSerializer(allocations, many=True).data
    return rows[0] if len(rows) == 1 else {"allocations": rows}


class FlavorListView(BaseListAPIView):
    serializer_class = s.FlavorSerializer

    def get_queryset(self):
        return Flavor.objects.annotate(
            available=Count("nodes", filter=Q(nodes__state=Node.State.AVAILABLE, nodes__approved=True))
        ).order_by("name")


class AllocateView(BaseAPIView):
    @extend_schema(
        request=s.AllocateSerializer,
        responses={202: s.AllocationStatusSerializer, 200: s.AllocationPlanSerializer, 422: QUOTA_EXCEEDED},
        summary="Allocate bare-metal GPU node(s) to a project (CCP)",
    )
    @idempotent
    def post(self, request):
        values = validated(s.AllocateSerializer, request.data)
        project = policy.get_object(
            Project.objects.select_related("tenant"),
            self.principal,
            Perm.PROJECT_VIEW,
            tenant__tenant_id=values["tenant_id"],
            project_id=values["project_id"],
        )
        return _allocate(self.principal, project, values)


@extend_schema_view(
    get=extend_schema(summary="The project's allocations (placement source of truth for apps)")
)
class ProjectAllocationListView(ProjectScopedMixin, FilteredListAPIView):
    serializer_class = s.AllocationSerializer
    filterset_class = AllocationFilter
    queryset = Allocation.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        project = self.project(Perm.ALLOCATION_VIEW)
        return Allocation.objects.filter(project=project).select_related("node", "flavor")

    @extend_schema(
        request=s.ProjectAllocateSerializer,
        responses={202: s.AllocationStatusSerializer, 200: s.AllocationPlanSerializer, 422: QUOTA_EXCEEDED},
        summary="Allocate node(s) to this project",
    )
    @idempotent
    def post(self, request, project_pk):
        data = validated(s.ProjectAllocateSerializer, request.data)
        return _allocate(self.principal, self.project(), data)


def _allocate(principal, project, values) -> Response:
    args = {
        "flavor_name": values["flavor"],
        "os_image": values["os_image"],
        "network_id": values["network_id"],
        "count": values["count"],
    }
    if values["dry_run"]:
        return Response(_plan_body(services.preview(principal, project, **args)))
    allocations = services.allocate(principal, project, **args)
    return Response(_status_body(allocations), status=202)


class ProjectAllocationDetailView(ProjectScopedMixin, BaseAPIView):
    @extend_schema(responses=s.AllocationDetailSerializer, summary="An allocation with its pipeline steps")
    def get(self, request, project_pk, pk):
        project = self.project(Perm.ALLOCATION_VIEW)
        allocation = policy.get_object(
            Allocation.objects.filter(project=project)
            .select_related("node", "flavor")
            .prefetch_related("steps"),
            self.principal,
            Perm.ALLOCATION_VIEW,
            pk=pk,
        )
        return Response(s.AllocationDetailSerializer(allocation).data)


class NodeStatusView(BaseAPIView):
    @extend_schema(
        responses=s.AllocationStatusSerializer, summary="Provisioning status of the caller's allocation"
    )
    def get(self, request, node_id):
        allocation = services.for_node(self.principal, node_id)
        return Response(s.AllocationStatusSerializer(allocation).data)


class NodeReleaseView(BaseAPIView):
    @extend_schema(
        request=s.ReleaseSerializer,
        responses={202: s.AllocationStatusSerializer},
        summary="Release the node (drain, undo provisioning, back to the pool)",
    )
    @idempotent
    def post(self, request, node_id):
        data = validated(s.ReleaseSerializer, request.data)
        allocation = services.for_node(self.principal, node_id)
        allocation = services.release(self.principal, allocation, **data)
        allocation = Allocation.objects.select_related("tenant", "project", "flavor").get(pk=allocation.pk)
        return Response(s.AllocationStatusSerializer(allocation).data, status=202)
