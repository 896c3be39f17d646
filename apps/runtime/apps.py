from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "apps.runtime"
    label = "runtime"

    def ready(self):
        from apps.allocations.drivers import agent
        from apps.core import secrets
        from apps.runtime import selectors, services
        from apps.runtime.models import RuntimeSecret
        from apps.tenancy import quotas

        agent.drain.register(services.drain_allocation)
        quotas.register_usage(selectors.quota_usage)
        secrets.owned_by(RuntimeSecret)
        from apps.runtime import receivers  # noqa: F401
