from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "apps.access"
    label = "access"
    verbose_name = "Host access"

    def ready(self):
        from apps.access import receivers  # noqa: F401 - connects them
