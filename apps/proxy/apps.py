from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "apps.proxy"
    label = "proxy"
    verbose_name = "Platform proxy"

    def ready(self):
        from apps.proxy import receivers  # noqa: F401 - connects them
        from apps.proxy.paths import base_path
        from apps.runtime import rendering

        rendering.provide_base_path(base_path)
