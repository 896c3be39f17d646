from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self):
        from apps.core import correlation

        correlation.connect_celery_signals()
