from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "apps.runtime"
    label = "runtime"

    def ready(self):
        from apps.runtime import receivers  # noqa: F401
