from __future__ import annotations

from rest_framework import serializers

from apps.core.models import AuditEvent
from apps.tenancy.models import Membership, Project, ServiceAccount, Tenant, ccp_identifier
from apps.tenancy.quotas import validate_quota
from apps.tenancy.roles import PROJECT_ROLES, Limit


class ProjectSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = ["id", "project_id", "name"]


class ProjectSerializer(serializers.ModelSerializer):
    tenant = serializers.UUIDField(source="tenant_id", read_only=True)
    tenant_id = serializers.CharField(source="tenant.tenant_id", read_only=True)

    class Meta:
        model = Project
        fields = ["id", "project_id", "name", "tenant", "tenant_id", "created_at"]


class ProjectCreateSerializer(serializers.Serializer):
    tenant = serializers.UUIDField(
        required=False, help_text="Platform tenant UUID; defaults to the caller's only tenant."
    )
    project_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    name = serializers.CharField(max_length=200)


class TenantSerializer(serializers.ModelSerializer):
    projects = ProjectSummarySerializer(many=True, read_only=True)
    quota = serializers.SerializerMethodField()
    network = serializers.SerializerMethodField()
    storage = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = [
            "id",
            "tenant_id",
            "name",
            "realm_name",
            "tier",
            "status",
            "status_reason",
            "projects",
            "network",
            "storage",
            "quota",
            "created_at",
            "updated_at",
        ]

    def get_quota(self, tenant) -> dict[str, int]:
        return {q.resource: q.limit for q in tenant.quotas.all()}

    def get_network(self, tenant) -> dict | None:
        """The tenant's first VRF (taken at onboarding) with its VLANs; None until assigned."""
        vrfs = sorted(tenant.vrfs.all(), key=lambda vrf: vrf.assigned_at)
        if not vrfs:
            return None
        vrf = vrfs[0]
        return {
            "vrf": vrf.name,
            "vni": vrf.vni,
            "vlans": [{"purpose": vlan.purpose, "vlan_id": vlan.vlan_id} for vlan in vrf.vlans.all()],
            "vpcs": [other.vpc_id for other in vrfs if other.vpc_id],
        }

    def get_storage(self, tenant) -> dict | None:
        storage = getattr(tenant, "storage", None)
        if storage is None:
            return None
        return {
            "path": storage.path,
            "nodemap": storage.nodemap,
            "pkey": storage.pkey,
            "quota_gb": storage.quota_gb,
            "status": storage.status,
        }


class OnboardProjectSerializer(serializers.Serializer):
    project_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    name = serializers.CharField(max_length=200)


class OnboardTenantSerializer(serializers.Serializer):
    tenant_id = serializers.CharField(max_length=64, validators=[ccp_identifier])
    name = serializers.CharField(max_length=200)
    realm_name = serializers.CharField(max_length=200)
    tier = serializers.CharField(max_length=32, required=False, default="standard")
    quota = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False)
    projects = OnboardProjectSerializer(many=True, required=False)

    def validate_quota(self, value):
        errors = validate_quota(value)
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate_projects(self, value):
        ids = [item["project_id"] for item in value]
        if len(ids) != len(set(ids)):
            raise serializers.ValidationError("project_id values must be unique.")
        return value


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    project = serializers.UUIDField(source="project_id", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "username", "role", "limit", "project", "created_at"]


class MembershipCreateSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=sorted(PROJECT_ROLES))
    limit = serializers.ChoiceField(choices=Limit.values, required=False, default="")


class ServiceAccountSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project_id", read_only=True)
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ServiceAccount
        fields = [
            "id",
            "name",
            "client_id",
            "role",
            "limit",
            "project",
            "active",
            "revoked_at",
            "last_token_at",
            "created_by",
            "created_at",
        ]


class ServiceAccountCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    role = serializers.ChoiceField(choices=sorted(PROJECT_ROLES))
    limit = serializers.ChoiceField(choices=Limit.values, required=False, default="")


class ServiceAccountCreatedSerializer(ServiceAccountSerializer):
    client_secret = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ServiceAccountSerializer.Meta):
        fields = [*ServiceAccountSerializer.Meta.fields, "client_secret"]


class TokenRequestSerializer(serializers.Serializer):
    grant_type = serializers.ChoiceField(choices=["client_credentials"])
    client_id = serializers.CharField(max_length=64)
    client_secret = serializers.CharField(max_length=200, trim_whitespace=False)


class TokenSerializer(serializers.Serializer):
    access_token = serializers.CharField()
    token_type = serializers.CharField()
    expires_in = serializers.IntegerField()


class AuditEventSerializer(serializers.ModelSerializer):
    # Null on platform-wide events (a platform service account, a tenant onboarding).
    tenant = serializers.UUIDField(source="tenant_id", read_only=True, allow_null=True)
    project = serializers.UUIDField(source="project_id", read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "occurred_at",
            "actor",
            "actor_type",
            "action",
            "target_type",
            "target_id",
            "tenant",
            "project",
            "outcome",
            "correlation_id",
            "source_ip",
            "details",
        ]
