from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "apps.runtime"
    label = "runtime"
