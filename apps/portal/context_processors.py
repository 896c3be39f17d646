from django.conf import settings


def portal(request):
    return {"oidc_enabled": settings.OIDC_ENABLED, "embedded_mode": settings.EMBEDDED}
