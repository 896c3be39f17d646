from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "apps.tenancy"
    label = "tenancy"

    def ready(self):
        from apps.core import secrets
        from apps.tenancy.auth import passwords  # noqa: F401 - connects the failed sign-in receiver
        from apps.tenancy.models import SigningKey

        secrets.owned_by(SigningKey)
