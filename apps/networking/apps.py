from django.apps import AppConfig


class NetworkingConfig(AppConfig):
    name = "apps.networking"
    label = "networking"

    def ready(self):
        from apps.networking import services, signals  # noqa: F401 - signals connects its receivers
        from apps.tenancy import onboarding

        onboarding.register_step(services.onboarding_step)
