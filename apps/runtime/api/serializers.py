from __future__ import annotations

from rest_framework import serializers

from apps.runtime import routes
from apps.runtime.agents import LOG_LINES_KEPT
from apps.runtime.models import AppInstance, InstanceEvent, InstanceLogLine, InstanceMember, Operation


class LaunchSerializer(serializers.Serializer):
    app = serializers.SlugField(max_length=64)
    version = serializers.CharField(max_length=32, required=False)
    allocation_id = serializers.UUIDField(required=False, help_text="the allocation of a single-node app")
    allocation_ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        max_length=64,
        help_text="a clustered app's allocations, one member each; the first is the primary",
    )
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    parameters = serializers.DictField(required=False, default=dict)


class EndpointSerializer(serializers.Serializer):
    name = serializers.CharField()
    protocol = serializers.CharField()
    exposure = serializers.CharField()
    url = serializers.CharField(allow_null=True)
    access = serializers.CharField(
        allow_null=True,
        help_text="a private endpoint: the ssh -L command, as the runtime user, that tunnels to it",
    )
    local_url = serializers.CharField(allow_null=True, help_text="where the tunnel serves it on your machine")


class MemberSerializer(serializers.ModelSerializer):
    node_id = serializers.UUIDField(read_only=True)
    allocation_id = serializers.UUIDField(read_only=True)
    hostname = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = InstanceMember
        fields = [
            "node_id",
            "hostname",
            "allocation_id",
            "rank",
            "role",
            "state",
            "state_reason",
            "last_report_at",
        ]


class AppInstanceSerializer(serializers.ModelSerializer):
    app = serializers.CharField(source="app.slug", read_only=True)
    version = serializers.CharField(source="app_version.version", read_only=True)
    allocation_id = serializers.UUIDField(read_only=True)
    project = serializers.UUIDField(source="project_id", read_only=True)
    endpoints = serializers.SerializerMethodField()
    members = MemberSerializer(many=True, read_only=True)

    class Meta:
        model = AppInstance
        fields = [
            "id",
            "name",
            "app",
            "version",
            "project",
            "allocation_id",
            "state",
            "state_reason",
            "ui_mode",
            "ui_mode_reason",
            "parameters",
            "shared_with_project",
            "created_by",
            "endpoints",
            "members",
            "created_at",
            "updated_at",
        ]

    def get_endpoints(self, instance) -> list[dict]:
        return [routes.describe(instance, endpoint) for endpoint in instance.endpoints.all()]


class OperationSerializer(serializers.ModelSerializer):
    resource = serializers.SerializerMethodField()

    class Meta:
        model = Operation
        fields = [
            "id",
            "kind",
            "state",
            "progress",
            "error",
            "resource",
            "requested_by",
            "created_at",
            "updated_at",
            "finished_at",
        ]

    def get_resource(self, operation) -> dict:
        return {
            "type": "app_instance",
            "id": str(operation.instance_id),
            "project": str(operation.project_id),
        }


class InstanceEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = InstanceEvent
        fields = ["id", "occurred_at", "kind", "message", "from_state", "to_state", "actor"]


class InstanceLogLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = InstanceLogLine
        fields = ["id", "received_at", "text", "dropped"]


class LogQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(
        min_value=0, required=False, help_text="only lines after this line id (to follow the log)"
    )
    tail = serializers.IntegerField(
        min_value=1, max_value=LOG_LINES_KEPT, required=False, help_text="only the newest N lines"
    )


# Revoked names are not looked up, and both lists go whole into the audit event.
MAX_SHARE_NAMES = 100


class ShareSerializer(serializers.Serializer):
    with_project = serializers.BooleanField(required=False)
    usernames = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, default=list, max_length=MAX_SHARE_NAMES
    )
    revoke_usernames = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, default=list, max_length=MAX_SHARE_NAMES
    )
