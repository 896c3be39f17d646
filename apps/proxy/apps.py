from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "apps.proxy"
    label = "proxy"
    verbose_name = "Platform proxy"

    def ready(self):
        from apps.proxy import receivers  # noqa: F401
