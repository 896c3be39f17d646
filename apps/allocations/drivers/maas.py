"""Canonical MAAS: machines are allocated, deployed with an OS image (power on,
PXE, install, cloud-init), powered and released (optionally erasing disks).

Deploy and release are asynchronous in MAAS; callers poll ``status``.
"""

from __future__ import annotations

import base64
import secrets
import time
from typing import Protocol

import httpx
from django.conf import settings

from apps.core import correlation, outbound, simulation
from apps.core.drivers import DriverError, load

# MAAS status_name values the pipeline acts on.
DEPLOYED = "Deployed"
DEPLOYING = "Deploying"
READY = "Ready"
ALLOCATED = "Allocated"
RELEASING = "Releasing"
FAILED_DEPLOYMENT = "Failed deployment"


class Maas(Protocol):
    def allocate(self, node) -> str: ...
    def deploy(self, node, os_image: str, user_data: str) -> None: ...
    def status(self, node) -> str: ...
    def power_on(self, node) -> None: ...
    def power_off(self, node) -> None: ...
    def release(self, node, erase: bool) -> None: ...


def driver() -> Maas:
    return load(
        "maas",
        {
            "simulated": "apps.allocations.drivers.maas.SimulatedMaas",
            "real": "apps.allocations.drivers.maas.HttpMaas",
        },
    )


class SimulatedMaas:
    """Machines kept as ``SimulatedResource`` rows keyed by hostname."""

    system = "maas"

    def _machine(self, node):
        machine = simulation.get(self.system, "machine", node.hostname)
        if machine is None:
            machine = simulation.put(
                self.system,
                "machine",
                node.hostname,
                system_id=node.maas_system_id or f"sim-{secrets.token_hex(3)}",
                status=READY,
                power="off",
            )
        return machine

    def _fault(self, operation: str, node) -> bool:
        return simulation.inject(self.system, operation, node.hostname) == simulation.HANG

    def allocate(self, node) -> str:
        self._fault("allocate", node)
        machine = self._machine(node)
        if machine.state["status"] in (READY, ALLOCATED):
            simulation.update(machine, status=ALLOCATED)
        return machine.state["system_id"]

    def deploy(self, node, os_image: str, user_data: str) -> None:
        hang = self._fault("deploy", node)
        machine = self._machine(node)
        if machine.state["status"] in (DEPLOYING, DEPLOYED):
            return
        simulation.update(
            machine,
            status=DEPLOYING,
            power="on",
            os_image=os_image,
            ready_at=None if hang else simulation.ready_at(),
        )

    def status(self, node) -> str:
        machine = self._machine(node)
        state = machine.state
        if state["status"] == DEPLOYING and simulation.is_ready(state.get("ready_at")):
            simulation.update(machine, status=DEPLOYED)
            return DEPLOYED
        if state["status"] == RELEASING and simulation.is_ready(state.get("ready_at")):
            simulation.update(machine, status=READY, power="off", os_image=None)
            return READY
        return state["status"]

    def power_on(self, node) -> None:
        self._fault("power_on", node)
        simulation.update(self._machine(node), power="on")

    def power_off(self, node) -> None:
        self._fault("power_off", node)
        simulation.update(self._machine(node), power="off")

    def release(self, node, erase: bool) -> None:
        hang = self._fault("release", node)
        machine = self._machine(node)
        if machine.state["status"] in (READY, RELEASING):
            return
        simulation.update(
            machine, status=RELEASING, erased=erase, ready_at=None if hang else simulation.ready_at()
        )


class HttpMaas:
    """MAAS REST API 2.0 with its OAuth1 PLAINTEXT signature.

    ``GPUAAS_MAAS_URL`` (``http://maas:5240/MAAS``) and ``GPUAAS_MAAS_API_KEY``
    (``consumer_key:token_key:token_secret`` as MAAS prints it).
    """

    def __init__(self):
        self.base = settings.MAAS_URL.rstrip("/") + "/api/2.0"
        try:
            self.consumer_key, self.token_key, self.token_secret = settings.MAAS_API_KEY.split(":")
        except ValueError:
            raise DriverError(
                "GPUAAS_MAAS_API_KEY must be consumer_key:token_key:token_secret", transient=False
            ) from None

    def _authorization(self) -> str:
        params = {
            "oauth_version": "1.0",
            "oauth_signature_method": "PLAINTEXT",
            "oauth_consumer_key": self.consumer_key,
            "oauth_token": self.token_key,
            "oauth_signature": f"&{self.token_secret}",
            "oauth_nonce": secrets.token_hex(8),
            "oauth_timestamp": str(int(time.time())),
        }
        return "OAuth " + ", ".join(f'{key}="{value}"' for key, value in params.items())

    def _call(self, method: str, path: str, *, op: str | None = None, data: dict | None = None) -> dict:
        url = f"{self.base}{path}"
        headers = {
            "Authorization": self._authorization(),
            "Accept": "application/json",
            **correlation.outbound_headers(),
        }
        try:
            response = httpx.request(
                method,
                url,
                params={"op": op} if op else None,
                data=data,
                headers=headers,
                verify=outbound.tls(),
                timeout=settings.DRIVER_HTTP_TIMEOUT,
            )
        except httpx.HTTPError as exc:
            raise DriverError(f"MAAS unreachable: {exc.__class__.__name__}") from exc
        if response.status_code >= 500 or response.status_code == 503:
            raise DriverError(f"MAAS answered {response.status_code} to {op or method} {path}")
        if response.status_code >= 400:
            raise DriverError(
                f"MAAS refused {op or method} {path}: {response.status_code} {response.text[:200]}",
                transient=response.status_code == 409,
            )
        return response.json() if response.content else {}

    def _system_id(self, node) -> str:
        if node.maas_system_id:
            return node.maas_system_id
        machines = self._call("GET", "/machines/", data=None)
        for machine in machines if isinstance(machines, list) else []:
            if machine.get("hostname") == node.hostname:
                return machine["system_id"]
        raise DriverError(f"MAAS knows no machine {node.hostname}", transient=False, hardware=True)

    def allocate(self, node) -> str:
        system_id = self._system_id(node)
        machine = self._call("GET", f"/machines/{system_id}/")
        if machine.get("status_name") in (ALLOCATED, DEPLOYING, DEPLOYED):
            return system_id  # already ours: allocate is idempotent
        self._call("POST", "/machines/", op="allocate", data={"system_id": system_id})
        return system_id

    def deploy(self, node, os_image: str, user_data: str) -> None:
        system_id = self._system_id(node)
        machine = self._call("GET", f"/machines/{system_id}/")
        if machine.get("status_name") in (DEPLOYING, DEPLOYED):
            return
        self._call(
            "POST",
            f"/machines/{system_id}/",
            op="deploy",
            data={
                "distro_series": os_image,
                "user_data": base64.b64encode(user_data.encode()).decode(),
            },
        )

    def status(self, node) -> str:
        return self._call("GET", f"/machines/{self._system_id(node)}/").get("status_name", "")

    def power_on(self, node) -> None:
        self._call("POST", f"/machines/{self._system_id(node)}/", op="power_on")

    def power_off(self, node) -> None:
        self._call("POST", f"/machines/{self._system_id(node)}/", op="power_off")

    def release(self, node, erase: bool) -> None:
        system_id = self._system_id(node)
        machine = self._call("GET", f"/machines/{system_id}/")
        if machine.get("status_name") in (READY, RELEASING, "Disk erasing"):
            return
        self._call(
            "POST", f"/machines/{system_id}/", op="release", data={"erase": "true" if erase else "false"}
        )
