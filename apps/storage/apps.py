from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "apps.storage"
    label = "storage"

    def ready(self):
        from apps.storage import selectors, services
        from apps.tenancy import onboarding, quotas

        onboarding.register_step(services.onboarding_step)
        quotas.register_usage(selectors.quota_usage)
