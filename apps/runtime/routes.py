"""Where a browser or a user reaches an instance's endpoint: the read model the
API and the portal show (the platform proxy owns the routes themselves)."""

from __future__ import annotations

from apps.access import services as host_access

NOT_READY = "SSH access to the node is not ready yet (see the allocation's Access tab)"


def describe(instance, endpoint) -> dict:
    url = access = local_url = None
    if endpoint.exposure == "platform_proxy":
        route = next((r for r in instance.proxy_routes.all() if r.endpoint_name == endpoint.name), None)
        url = route.public_url if route else None
    elif endpoint.port:
        # A private endpoint listens only on the node: the user tunnels to it as the
        # allocation's runtime user, then opens the same port on their own machine.
        target = endpoint.host or "127.0.0.1"
        access = host_access.tunnel_command(instance.allocation, target, endpoint.port) or NOT_READY
        local_url = f"http://127.0.0.1:{endpoint.port}/"
    return {
        "name": endpoint.name,
        "protocol": endpoint.protocol,
        "exposure": endpoint.exposure,
        "url": url,
        "access": access,
        "local_url": local_url,
    }
