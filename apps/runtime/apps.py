from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "apps.runtime"
    label = "runtime"

    def ready(self):
        from apps.allocations.drivers import agent
        from apps.runtime import services

        agent.register_drainer(services.drain_allocation)
        from apps.runtime import receivers  # noqa: F401
