"""Where a browser or a user reaches an instance's endpoint: the read model the
API and the portal show (the platform proxy owns the routes themselves)."""

from __future__ import annotations


def describe(instance, endpoint) -> dict:
    url = access = None
    if endpoint.exposure == "platform_proxy":
        route = next((r for r in instance.proxy_routes.all() if r.endpoint_name == endpoint.name), None)
        url = route.public_url if route else None
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
