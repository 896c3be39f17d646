"""How a workload's UI is exposed: ``native``, ``embedded`` or ``link_out`` (seed 002).

The manifest only declares capability; the platform decides from that, the
endpoint's adapter, the environment (is there an apps domain for subdomain
routes?) and an operator's override, and keeps the reason next to the decision.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from apps.catalog.manifests import proxied_endpoints
from apps.proxy.adapters import Adapter

NATIVE, EMBEDDED, LINK_OUT = "native", "embedded", "link_out"


@dataclass(frozen=True)
class Exposure:
    mode: str
    reason: str
    route_mode: str | None  # "subdomain", "path_prefix", or None when nothing is proxied


def route_mode_for(manifest: dict, adapter: Adapter) -> tuple[str | None, str]:
    """``subdomain`` whenever there is an apps domain (each route its own origin);
    else ``path_prefix`` on the portal's origin, only for prefix-safe apps."""
    if settings.APPS_DOMAIN:
        return "subdomain", "each app gets its own origin under the apps domain"
    prefix_safe = adapter.route_mode != "subdomain" and (
        adapter.base_url == "platform_path" or manifest.get("ui", {}).get("path_prefix_safe", False)
    )
    if prefix_safe:
        return "path_prefix", "no apps domain is configured, so the app shares the portal's origin"
    return None, "the app needs its own origin and no apps domain (GPUAAS_APPS_DOMAIN) is configured"


def decide(manifest: dict, override: str = "") -> Exposure:
    """The platform's decision, applying seed 002's fallback-to-link-out criteria in order."""
    proxied = proxied_endpoints(manifest)
    if not proxied:
        return Exposure(NATIVE, "no endpoint is exposed through the platform proxy", None)
    adapter = Adapter.from_endpoint(proxied[0])
    route_mode, route_reason = route_mode_for(manifest, adapter)
    if route_mode is None:
        return Exposure(NATIVE, route_reason, None)
    if override == NATIVE:
        return Exposure(NATIVE, "an operator chose to show no app UI", route_mode)
    ui = manifest.get("ui", {})
    supported = ui.get("mode_supported", [LINK_OUT])
    refusal = _cannot_embed(ui, adapter, supported) or _environment_refusal(route_mode)
    if override == EMBEDDED and refusal is None:
        return Exposure(EMBEDDED, "an operator chose to embed it", route_mode)
    if override == LINK_OUT:
        return Exposure(LINK_OUT, "an operator chose to open it in its own tab", route_mode)
    if refusal is None:
        return Exposure(EMBEDDED, f"it satisfies the gateway contract; {route_reason}", route_mode)
    if LINK_OUT in supported or override == EMBEDDED:
        return Exposure(LINK_OUT, refusal, route_mode)
    return Exposure(NATIVE, f"{refusal}, and it does not support opening in its own tab", route_mode)


def same_site(host: str, domain: str) -> bool:
    """Whether browsers count a host and the apps domain as one site, which an
    embedded app's SameSite cookies need. The registrable domain is taken as the
    last two labels; an IP address or a single-label name such as ``localhost``
    (and so every ``*.localhost`` name) is a site of its own."""
    try:
        ipaddress.ip_address(host)
        return False
    except ValueError:
        pass
    labels, domain_labels = host.lower().split("."), domain.lower().split(".")
    if len(labels) < 2 or len(domain_labels) < 2 or labels[-1] == "localhost":
        return False
    return labels[-2:] == domain_labels[-2:]


def _environment_refusal(route_mode: str) -> str | None:
    if route_mode == "subdomain" and not same_site(
        urlsplit(settings.ISSUER).hostname or "", settings.APPS_DOMAIN
    ):
        return (
            "the apps domain is another site than the portal's, so the app's cookies would not work inside it"
        )
    return None


def _cannot_embed(ui: dict, adapter: Adapter, supported: list[str]) -> str | None:
    if EMBEDDED not in supported:
        return "the app does not declare embedding support"
    if adapter.auth == "bearer_passthrough":
        return "the app's auth cannot be started by the gateway"
    if ui.get("cookie_constraints") == "cross_site":
        return "the app's cookies need cross-site behaviour"
    if not ui.get("same_origin_proxy_safe"):
        return "the app does not declare itself safe behind the same-origin proxy"
    if ui.get("requires_websocket") and not adapter.websocket:
        return "the app needs WebSockets its adapter does not declare"
    return None
