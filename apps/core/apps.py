from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self):
        from apps.core import correlation, schema  # noqa: F401 - schema registers OpenAPI extensions

        correlation.connect_celery_signals()
