from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "apps.access"
    label = "access"
    verbose_name = "Host access"

    def ready(self):
        from apps.access.models import AccessCredential, ProjectSecret
        from apps.core import secrets

        secrets.owned_by(AccessCredential, ProjectSecret)
