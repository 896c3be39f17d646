from django.apps import AppConfig


class NetworkingConfig(AppConfig):
    name = "apps.networking"
    label = "networking"

    def ready(self):
        from apps.networking import signals  # noqa: F401
