"""Proxy adapters as data (seed 003 "Proxy Adapter Model").

An adapter says how the shared proxy runtime treats one app endpoint: where a
browser enters, how the proxy authenticates to the app, whether the app serves
under the platform's base path, which cookie paths it uses, what it rewrites and
how the launcher verifies that the app booted. It comes from the manifest's
``endpoints[].proxy`` block, so a new app needs manifest data, not proxy code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

AUTH_STRATEGIES = ("none", "bearer_passthrough", "upstream_token_bridge")
VERIFY_STRATEGIES = ("none", "html_only", "html_plus_asset")


@dataclass(frozen=True)
class Adapter:
    entry_path: str = "/"  # where the launcher sends the browser, relative to the app's root
    auth: str = "none"
    bridge_header: str = ""
    bridge_scheme: str = ""
    bridge_secret: str = ""  # the runtime secret's name, never its value
    base_url: str = "none"  # "platform_path": the app serves under /w/{iid}/{endpoint}/ itself
    cookie_scope: str = "public_prefix"
    rewrite: str = "headers_only"
    verify: str = "html_plus_asset"
    websocket: bool = False
    route_mode: str = "path_prefix"  # the mode the app needs: "subdomain" when not prefix-safe
    idle_timeout_seconds: int | None = None
    max_connections_per_instance: int | None = None
    max_connections_per_user: int | None = None

    @classmethod
    def from_endpoint(cls, endpoint: dict) -> Adapter:
        proxy = endpoint.get("proxy", {})
        bridge = proxy.get("auth_bridge")
        auth = proxy.get("auth", "upstream_token_bridge" if bridge else "none")
        limits = proxy.get("limits", {})
        return cls(
            entry_path=proxy.get("default_open_path", "/"),
            auth=auth,
            bridge_header=bridge["header"] if bridge else "",
            bridge_scheme=bridge.get("scheme", "") if bridge else "",
            bridge_secret=bridge["source"].split(".", 1)[1] if bridge else "",
            base_url="platform_path" if proxy.get("base_url_aware") else "none",
            cookie_scope=proxy.get("cookie_scope_strategy", "public_prefix"),
            rewrite="headers_only" if proxy.get("rewrite", "none") == "none" else proxy["rewrite"],
            verify=proxy.get("verify", "html_plus_asset"),
            websocket=bool(proxy.get("websocket_required")),
            route_mode=proxy.get("mode", "path_prefix"),
            idle_timeout_seconds=proxy.get("idle_timeout_seconds"),
            max_connections_per_instance=limits.get("per_instance"),
            max_connections_per_user=limits.get("per_user"),
        )

    @classmethod
    def from_policy(cls, policy: dict) -> Adapter:
        return cls(**policy.get("adapter", {}))

    def as_dict(self) -> dict:
        return asdict(self)
