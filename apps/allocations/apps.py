from django.apps import AppConfig


class AllocationsConfig(AppConfig):
    name = "apps.allocations"
    label = "allocations"

    def ready(self):
        from apps.allocations import selectors
        from apps.tenancy import quotas

        quotas.register_usage(selectors.quota_usage)
