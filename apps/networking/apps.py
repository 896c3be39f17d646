from django.apps import AppConfig


class NetworkingConfig(AppConfig):
    name = "apps.networking"
    label = "networking"
