from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "apps.runtime"
    label = "runtime"

    def ready(self):
        from apps.allocations.drivers import agent
        from apps.core import secrets
        from apps.runtime import services
        from apps.runtime.models import RuntimeSecret

        agent.register_drainer(services.drain_allocation)
        secrets.owned_by(RuntimeSecret)
        from apps.runtime import receivers  # noqa: F401
