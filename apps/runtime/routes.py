"""Where a browser or a user reaches an instance's endpoint (the platform proxy
owns the routes themselves; this is the read model the API shows)."""

from __future__ import annotations

from django.conf import settings

from apps.runtime.rendering import base_path


def describe(instance, endpoint) -> dict:
    url = access = None
    if endpoint.exposure == "platform_proxy":
        url = settings.ISSUER + base_path(instance.pk, endpoint.name)
    elif endpoint.port:
        access = (
            f"ssh -L {endpoint.port}:127.0.0.1:{endpoint.port} <user>@{instance.allocation.node.hostname}, "
            f"then http://127.0.0.1:{endpoint.port}/"
        )
    return {
        "name": endpoint.name,
        "protocol": endpoint.protocol,
        "exposure": endpoint.exposure,
        "url": url,
        "access": access,
    }
