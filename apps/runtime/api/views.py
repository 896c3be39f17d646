from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.response import Response

from apps.core.idempotency import idempotent
from apps.runtime import services
from apps.runtime.api import serializers as s
from apps.runtime.filters import AppInstanceFilter
from apps.runtime.models import AppInstance, Operation
from apps.tenancy import policy
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView, FilteredListAPIView, validated
from apps.tenancy.api.views import ProjectScopedMixin
from apps.tenancy.roles import Perm


def _instance_detail(instance_id) -> AppInstance:
    return (
        AppInstance.objects.select_related("app", "app_version", "allocation__node")
        .prefetch_related("endpoints", "members__node")
        .get(pk=instance_id)
    )


def _accepted(operation: Operation) -> Response:
    return Response(
        {
            "operation_id": str(operation.pk),
            "instance_id": str(operation.instance_id),
            **s.OperationSerializer(operation).data,
        },
        status=202,
    )


@extend_schema_view(get=extend_schema(summary="The project's app instances you may see"))
class InstanceListView(ProjectScopedMixin, FilteredListAPIView):
    serializer_class = s.AppInstanceSerializer
    filterset_class = AppInstanceFilter
    queryset = AppInstance.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        project = self.project(Perm.INSTANCE_VIEW)
        return (
            services.visible_instances(self.principal)
            .filter(project=project)
            .select_related("app", "app_version", "allocation__node")
            .prefetch_related("endpoints", "members__node")
        )

    @extend_schema(
        request=s.LaunchSerializer,
        responses={202: s.OperationSerializer},
        summary="Launch a catalog app on an ACTIVE allocation of the project",
    )
    @idempotent
    def post(self, request, project_pk):
        values = validated(s.LaunchSerializer, request.data)
        operation = services.launch(
            self.principal,
            self.project(),
            app_slug=values["app"],
            version=values.get("version"),
            allocation_id=values.get("allocation_id"),
            allocation_ids=values.get("allocation_ids"),
            parameters=values["parameters"],
            name=values.get("name", ""),
        )
        return _accepted(operation)


class InstanceDetailView(BaseAPIView):
    @extend_schema(responses=s.AppInstanceSerializer, summary="An app instance")
    def get(self, request, project_pk, pk):
        instance = services.get_instance(self.principal, project_pk, pk)
        return Response(s.AppInstanceSerializer(_instance_detail(instance.pk)).data)

    @extend_schema(responses={202: s.OperationSerializer}, summary="Decommission the instance")
    def delete(self, request, project_pk, pk):
        instance = services.get_instance(self.principal, project_pk, pk)
        return _accepted(services.change(self.principal, instance, "decommission"))


class InstanceActionView(BaseAPIView):
    action_name = ""

    @extend_schema(request=None, responses={202: s.OperationSerializer}, summary="Stop or start the instance")
    @idempotent
    def post(self, request, project_pk, pk):
        instance = services.get_instance(self.principal, project_pk, pk)
        return _accepted(services.change(self.principal, instance, self.action_name))


class InstanceShareView(BaseAPIView):
    @extend_schema(
        request=s.ShareSerializer,
        responses=s.AppInstanceSerializer,
        summary="Share with the project or named users of the tenant",
    )
    @idempotent
    def post(self, request, project_pk, pk):
        data = validated(s.ShareSerializer, request.data)
        instance = services.get_instance(self.principal, project_pk, pk)
        services.share(self.principal, instance, **data)
        return Response(s.AppInstanceSerializer(_instance_detail(instance.pk)).data)


class InstanceEventListView(BaseListAPIView):
    serializer_class = s.InstanceEventSerializer

    def get_queryset(self):
        instance = services.get_instance(self.principal, self.kwargs["project_pk"], self.kwargs["pk"])
        return services.instance_events(instance)


@extend_schema_view(
    get=extend_schema(
        parameters=[s.LogQuerySerializer],
        summary="The instance's output (stdout and stderr), oldest first; the newest 10,000 lines are kept",
    )
)
class InstanceLogListView(BaseListAPIView):
    serializer_class = s.InstanceLogLineSerializer

    def get_queryset(self):
        instance = services.get_instance(self.principal, self.kwargs["project_pk"], self.kwargs["pk"])
        query = validated(s.LogQuerySerializer, self.request.query_params)
        return services.instance_logs(instance, **query)


class OperationDetailView(BaseAPIView):
    @extend_schema(responses=s.OperationSerializer, summary="A long-running operation")
    def get(self, request, pk):
        operation = policy.get_object(
            Operation.objects.filter(instance__in=services.visible_instances(self.principal)),
            self.principal,
            Perm.INSTANCE_VIEW,
            pk=pk,
        )
        return Response(s.OperationSerializer(operation).data)
