from __future__ import annotations

from rest_framework import serializers

from apps.allocations.models import Allocation, AllocationStep
from apps.catalog.models import Flavor
from apps.tenancy.models import ccp_identifier


class FlavorSerializer(serializers.ModelSerializer):
    available = serializers.IntegerField(read_only=True, help_text="free, approved nodes of this flavor")

    class Meta:
        model = Flavor
        fields = ["name", "gpu_model", "gpus_per_node", "cpu_cores", "memory_gb", "available"]


class AllocateSerializer(serializers.Serializer):
    flavor = serializers.CharField(max_length=64)
    os_image = serializers.CharField(max_length=128)
    network_id = serializers.CharField(max_length=128, required=False, default="", allow_blank=True)
    tenant_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    project_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    count = serializers.IntegerField(required=False, default=1, min_value=1, max_value=64)
    dry_run = serializers.BooleanField(required=False, default=False)


class ProjectAllocateSerializer(serializers.Serializer):
    flavor = serializers.CharField(max_length=64)
    os_image = serializers.CharField(max_length=128)
    network_id = serializers.CharField(max_length=128, required=False, default="", allow_blank=True)
    count = serializers.IntegerField(required=False, default=1, min_value=1, max_value=64)
    dry_run = serializers.BooleanField(required=False, default=False)


class ReleaseSerializer(serializers.Serializer):
    drain = serializers.BooleanField(required=False, default=True)
    erase_disk = serializers.BooleanField(required=False, default=False)


class AllocationStatusSerializer(serializers.ModelSerializer):
    """The CCP status shape (CONTRACT.md), with CCP's own tenant and project ids."""

    allocation_id = serializers.UUIDField(source="id", read_only=True)
    node_id = serializers.UUIDField(read_only=True)
    tenant_id = serializers.CharField(source="tenant.tenant_id", read_only=True)
    project_id = serializers.CharField(source="project.project_id", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)

    class Meta:
        model = Allocation
        fields = [
            "node_id",
            "allocation_id",
            "state",
            "step",
            "progress",
            "tenant_id",
            "project_id",
            "flavor",
            "os_image",
            "failure_reason",
            "created_at",
            "updated_at",
        ]


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = AllocationStep
        fields = ["phase", "name", "status", "attempts", "started_at", "finished_at", "error"]


class AllocationSerializer(serializers.ModelSerializer):
    node_id = serializers.UUIDField(read_only=True)
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    project = serializers.UUIDField(source="project_id", read_only=True)

    class Meta:
        model = Allocation
        fields = [
            "id",
            "node_id",
            "hostname",
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
            "created_at",
            "updated_at",
            "activated_at",
            "finished_at",
        ]


class AllocationDetailSerializer(AllocationSerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta(AllocationSerializer.Meta):
        fields = [*AllocationSerializer.Meta.fields, "steps"]


class QuotaItemSerializer(serializers.Serializer):
    used = serializers.IntegerField()
    limit = serializers.IntegerField(allow_null=True)
    requested = serializers.IntegerField()
    after = serializers.IntegerField()


class AllocationPlanSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField(default=True)
    allowed = serializers.BooleanField()
    reason = serializers.CharField()
    requested = serializers.IntegerField()
    free_nodes = serializers.IntegerField()
    quota = serializers.DictField(child=QuotaItemSerializer())
