from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "apps.access"
    label = "access"
    verbose_name = "Host access"

    def ready(self):
        from apps.access import services
        from apps.access.models import AccessCredential, ProjectSecret
        from apps.allocations.drivers import agent
        from apps.core import secrets

        secrets.owned_by(AccessCredential, ProjectSecret)
        agent.revoke_access.register(services.revoke_for_release)
        from apps.access import receivers  # noqa: F401
