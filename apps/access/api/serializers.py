from __future__ import annotations

from rest_framework import serializers

from apps.access.models import AuthorizedKey, UserSshKey


class HostKeySerializer(serializers.Serializer):
    type = serializers.CharField()
    public_key = serializers.CharField()
    fingerprint = serializers.CharField()


class AccessSerializer(serializers.Serializer):
    host = serializers.CharField(
        allow_null=True, help_text="null until the node's agent reported its SSH server"
    )
    port = serializers.IntegerField(allow_null=True)
    user = serializers.CharField(help_text="the allocation's runtime user")
    ssh_command = serializers.CharField(allow_null=True)
    host_key_fingerprints = serializers.ListField(
        child=serializers.CharField(), help_text="SHA256, as ssh shows"
    )
    host_keys = HostKeySerializer(many=True)
    known_hosts = serializers.ListField(
        child=serializers.CharField(), help_text="lines for ~/.ssh/known_hosts (no trust on first use)"
    )


class AuthorizedKeyCreateSerializer(serializers.Serializer):
    public_key = serializers.CharField(max_length=16_384, trim_whitespace=True)
    purpose = serializers.ChoiceField(
        choices=AuthorizedKey.Purpose.choices, default=AuthorizedKey.Purpose.USER
    )


class AuthorizedKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuthorizedKey
        fields = [
            "id",
            "fingerprint",
            "purpose",
            "owner",
            "state",
            "public_key",
            "comment",
            "created_at",
            "applied_at",
        ]


class ProfileKeyCreateSerializer(serializers.Serializer):
    public_key = serializers.CharField(max_length=16_384)
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)


class ProfileKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = UserSshKey
        fields = ["id", "name", "fingerprint", "public_key", "created_at"]


class AgentKeySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    public_key = serializers.CharField()


class AgentDesiredSerializer(serializers.Serializer):
    user = serializers.CharField(allow_null=True, help_text="the runtime user; null: no live allocation")
    keys = AgentKeySerializer(many=True)
    reported = serializers.BooleanField(
        help_text="false asks for a report even if nothing changed: the platform holds none yet, "
        "or keys wait to be seen gone from the node"
    )


class AgentReportSerializer(serializers.Serializer):
    user = serializers.CharField(max_length=32)
    port = serializers.IntegerField(min_value=1, max_value=65535)
    host_keys = serializers.ListField(child=serializers.CharField(max_length=16_384), max_length=8)
    applied = serializers.ListField(
        child=serializers.UUIDField(), max_length=1000, help_text="the key ids the managed block holds"
    )
