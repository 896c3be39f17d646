from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "apps.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring and alerts"

    def ready(self):
        from apps.core import secrets
        from apps.metering import signals as metering
        from apps.monitoring.alerts import services, subscriptions
        from apps.monitoring.models import AlertSubscription
        from apps.webhooks import services as webhooks

        # Alert deliveries to a subscription are signed with that subscription's secret.
        webhooks.SIGNERS[webhooks.ALERT] = subscriptions.signing_secret
        secrets.owned_by(AlertSubscription)
        # Quota use crossing 80 % or 90 % (and falling back) feeds the quota alert rules.
        metering.quota_threshold_crossed.connect(
            services.on_quota_level, dispatch_uid="monitoring.quota_crossed"
        )
        metering.quota_threshold_cleared.connect(
            services.on_quota_level, dispatch_uid="monitoring.quota_cleared"
        )
