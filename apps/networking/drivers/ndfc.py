"""Cisco NDFC: attach and detach a node's switch port to a tenant VRF and its VLANs."""

from __future__ import annotations

from typing import Protocol

import httpx
from django.conf import settings

from apps.core import correlation, outbound, simulation
from apps.core.drivers import DriverError, load


class Ndfc(Protocol):
    def attach(self, node, vrf_name: str, vlans: dict[str, int]) -> dict: ...
    def detach(self, node, vrf_name: str) -> None: ...


def driver() -> Ndfc:
    return load(
        "ndfc",
        {
            "simulated": "apps.networking.drivers.ndfc.SimulatedNdfc",
            "real": "apps.networking.drivers.ndfc.HttpNdfc",
        },
    )


class SimulatedNdfc:
    """Switch-port attachments kept as ``SimulatedResource`` rows keyed by hostname."""

    system = "ndfc"

    def attach(self, node, vrf_name: str, vlans: dict[str, int]) -> dict:
        if simulation.inject(self.system, "attach", node.hostname) == simulation.HANG:
            raise DriverError(f"NDFC did not confirm the attachment of {node.hostname}")
        port = simulation.get(self.system, "port", node.hostname)
        if port and port.state.get("vrf") not in (None, vrf_name):
            raise DriverError(f"{node.hostname} is attached to another VRF", transient=False)
        simulation.put(self.system, "port", node.hostname, vrf=vrf_name, vlans=vlans)
        return {"vrf": vrf_name, "vlans": vlans}

    def detach(self, node, vrf_name: str) -> None:
        simulation.inject(self.system, "detach", node.hostname)
        port = simulation.get(self.system, "port", node.hostname)
        if port and port.state.get("vrf") == vrf_name:
            simulation.delete(self.system, "port", node.hostname)


class HttpNdfc:
    """NDFC REST (top-down LAN fabric API): ``GPUAAS_NDFC_URL``, ``GPUAAS_NDFC_USER``,
    ``GPUAAS_NDFC_PASSWORD``, ``GPUAAS_NDFC_FABRIC``; each node names its leaf
    switch serial and interface."""

    API = "/appcenter/cisco/ndfc/api/v1/lan-fabric/rest/top-down/fabrics"

    def __init__(self):
        self.base = settings.NDFC_URL.rstrip("/")
        self.fabric = settings.NDFC_FABRIC
        self._token: str | None = None

    def _login(self) -> str:
        try:
            response = httpx.post(
                f"{self.base}/login",
                json={
                    "userName": settings.NDFC_USER,
                    "userPasswd": settings.NDFC_PASSWORD,
                    "domain": "local",
                },
                verify=outbound.tls(),
                timeout=settings.DRIVER_HTTP_TIMEOUT,
            )
        except httpx.HTTPError as exc:
            raise DriverError(f"NDFC unreachable: {exc.__class__.__name__}") from exc
        if response.status_code != 200:
            raise DriverError(
                f"NDFC login failed: {response.status_code}", transient=response.status_code >= 500
            )
        return response.json()["jwttoken"]

    def _call(self, method: str, path: str, body) -> httpx.Response:
        for attempt in range(2):
            if self._token is None:
                self._token = self._login()
            try:
                response = httpx.request(
                    method,
                    f"{self.base}{self.API}/{self.fabric}{path}",
                    json=body,
                    headers={
                        "Authorization": f"Bearer {self._token}",
                        **correlation.outbound_headers(),
                    },
                    verify=outbound.tls(),
                    timeout=settings.DRIVER_HTTP_TIMEOUT,
                )
            except httpx.HTTPError as exc:
                raise DriverError(f"NDFC unreachable: {exc.__class__.__name__}") from exc
            if response.status_code == 401 and attempt == 0:
                self._token = None  # expired session: log in again once
                continue
            if response.status_code >= 500:
                raise DriverError(f"NDFC answered {response.status_code} to {path}")
            if response.status_code >= 400:
                raise DriverError(
                    f"NDFC refused {path}: {response.status_code} {response.text[:200]}", transient=False
                )
            return response
        raise DriverError("NDFC rejected our credentials", transient=False)

    @staticmethod
    def _switch(node) -> tuple[str, str]:
        if not node.switch_serial or not node.switch_port:
            raise DriverError(
                f"{node.hostname} has no leaf switch port recorded", transient=False, hardware=True
            )
        return node.switch_serial, node.switch_port

    def _attachment(self, node, vrf_name: str, vlan: int, deploy: bool) -> list[dict]:
        serial, interface = self._switch(node)
        return [
            {
                "vrfName": vrf_name,
                "lanAttachList": [
                    {
                        "fabric": self.fabric,
                        "vrfName": vrf_name,
                        "serialNumber": serial,
                        "vlan": vlan,
                        "deployment": deploy,
                        "instanceValues": "",
                        "freeformConfig": "",
                        "extensionValues": "",
                        "torPorts": interface,
                    }
                ],
            }
        ]

    def attach(self, node, vrf_name: str, vlans: dict[str, int]) -> dict:
        self._call("POST", "/vrfs/attachments", self._attachment(node, vrf_name, vlans["gpu_worker"], True))
        self._call("POST", "/vrfs/deployments", {"vrfNames": vrf_name})
        return {"vrf": vrf_name, "vlans": vlans}

    def detach(self, node, vrf_name: str) -> None:
        self._call("POST", "/vrfs/attachments", self._attachment(node, vrf_name, 0, False))
        self._call("POST", "/vrfs/deployments", {"vrfNames": vrf_name})
