from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "apps.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring and alerts"

    def ready(self):
        from apps.monitoring.alerts import subscriptions
        from apps.webhooks import services as webhooks

        # Alert deliveries to a subscription are signed with that subscription's secret.
        webhooks.SIGNERS[webhooks.ALERT] = subscriptions.signing_secret
