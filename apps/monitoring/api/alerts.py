"""Alerts API (CONTRACT "Monitoring and alerts"): subscriptions and the alert list."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.idempotency import idempotent
from apps.monitoring.alerts import services, subscriptions
from apps.monitoring.models import Alert
from apps.tenancy.api.base import BaseAPIView, BaseListAPIView, validated

SEVERITIES = subscriptions.SEVERITIES


class SubscribeSerializer(serializers.Serializer):
    tenant_id = serializers.CharField(required=False, max_length=64, help_text="omit: platform-wide (CCP)")
    url = serializers.URLField(max_length=500)
    secret = serializers.CharField(min_length=16, max_length=256, write_only=True, trim_whitespace=False)
    severities = serializers.ListField(
        child=serializers.ChoiceField(choices=SEVERITIES), required=False, min_length=1, max_length=2
    )


class SubscriptionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    tenant_id = serializers.SerializerMethodField()
    url = serializers.URLField()
    severities = serializers.ListField(child=serializers.ChoiceField(choices=SEVERITIES))

    def get_tenant_id(self, subscription) -> str | None:
        return subscription.tenant.tenant_id if subscription.tenant_id else None


class AlertSerializer(serializers.ModelSerializer):
    alert_id = serializers.UUIDField(source="pk")
    rule = serializers.CharField(source="rule_id")
    tenant_id = serializers.SerializerMethodField()
    project_id = serializers.SerializerMethodField()
    node_id = serializers.UUIDField(allow_null=True)

    class Meta:
        model = Alert
        fields = [
            "alert_id",
            "rule",
            "severity",
            "state",
            "tenant_id",
            "project_id",
            "node_id",
            "hostname",
            "gpu",
            "value",
            "threshold",
            "started_at",
            "resolved_at",
            "summary",
        ]

    def get_tenant_id(self, alert) -> str | None:
        return alert.tenant.tenant_id if alert.tenant_id else None

    def get_project_id(self, alert) -> str | None:
        return alert.project.project_id if alert.project_id else None


class TestSendSerializer(serializers.Serializer):
    event_id = serializers.UUIDField()
    url = serializers.URLField()


class SubscribeView(BaseAPIView):
    @extend_schema(
        request=SubscribeSerializer,
        responses={201: SubscriptionSerializer},
        summary="Receive alerts at a URL: one tenant's, or every tenant's (platform callers)",
    )
    @idempotent
    def post(self, request):
        data = validated(SubscribeSerializer, request.data)
        subscription = subscriptions.subscribe(self.principal, **data)
        return Response(SubscriptionSerializer(subscription).data, status=201)


@extend_schema_view(get=extend_schema(summary="The alert subscriptions you may manage"))
class SubscriptionListView(BaseListAPIView):
    serializer_class = SubscriptionSerializer

    def get_queryset(self):
        return subscriptions.visible(self.principal)


class SubscriptionDetailView(BaseAPIView):
    @extend_schema(responses={204: None}, summary="Stop a subscription")
    def delete(self, request, subscription_id):
        subscriptions.unsubscribe(self.principal, subscription_id)
        return Response(status=204)


class SubscriptionTestView(BaseAPIView):
    @extend_schema(
        request=None,
        responses={202: TestSendSerializer},
        summary="Send a sample alert to this subscription, signed as real ones are",
    )
    def post(self, request, subscription_id):
        delivery = subscriptions.test_send(self.principal, subscription_id)
        return Response({"event_id": str(delivery.event_id), "url": delivery.url}, status=202)


@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter("tenant_id", str, description="one tenant's alerts (CCP tenant id)"),
            OpenApiParameter("state", str, enum=["firing", "resolved"]),
        ],
        summary="Alerts that fired, newest first",
    )
)
class AlertListView(BaseListAPIView):
    serializer_class = AlertSerializer

    def get_queryset(self):
        params = self.request.query_params
        return services.visible_alerts(
            self.principal, tenant_id=params.get("tenant_id"), state=params.get("state")
        )
