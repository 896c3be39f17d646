"""NVIDIA UFM: InfiniBand partition keys (PKeys) and their member port GUIDs."""

from __future__ import annotations

import re
from typing import Protocol

import httpx
from django.conf import settings

from apps.core import correlation, outbound, simulation
from apps.core.drivers import DriverError, load

_GUID = re.compile(r"^[0-9a-f]{16}$")


class Ufm(Protocol):
    def create_pkey(self, pkey: str) -> None: ...
    def add_guids(self, pkey: str, guids: list[str]) -> None: ...
    def remove_guids(self, pkey: str, guids: list[str]) -> None: ...


def driver() -> Ufm:
    return load(
        "ufm",
        {"simulated": "apps.storage.drivers.ufm.SimulatedUfm", "real": "apps.storage.drivers.ufm.HttpUfm"},
    )


class SimulatedUfm:
    system = "ufm"

    def create_pkey(self, pkey: str) -> None:
        simulation.inject(self.system, "create_pkey", pkey)
        if simulation.get(self.system, "pkey", pkey) is None:
            simulation.put(self.system, "pkey", pkey, guids=[])

    def add_guids(self, pkey: str, guids: list[str]) -> None:
        simulation.inject(self.system, "add_guids", pkey)
        with simulation.locked(self.system, "pkey", pkey, guids=[]) as resource:
            simulation.update(resource, guids=sorted(set(resource.state["guids"]) | set(guids)))

    def remove_guids(self, pkey: str, guids: list[str]) -> None:
        simulation.inject(self.system, "remove_guids", pkey)
        with simulation.locked(self.system, "pkey", pkey) as resource:
            if resource is not None:
                simulation.update(resource, guids=sorted(set(resource.state["guids"]) - set(guids)))


class HttpUfm:
    """UFM Enterprise REST API (``/ufmRest/resources/pkeys``): ``GPUAAS_UFM_URL`` and
    either ``GPUAAS_UFM_USER`` + ``GPUAAS_UFM_PASSWORD`` (basic authentication) or
    ``GPUAAS_UFM_TOKEN`` (an access token UFM issued, sent on its ``/ufmRestV3`` paths).

    PKeys are ours as four hex digits (``0101``) and UFM's as ``0x0101``; GUIDs are
    UFM's 16 hex digits, ours may carry ``0x`` or ``:`` separators.
    """

    def __init__(self):
        base = settings.UFM_URL.rstrip("/")
        if settings.UFM_TOKEN:
            self.base, self.auth = f"{base}/ufmRestV3", None
            self.headers = {"Authorization": f"Basic {settings.UFM_TOKEN}"}
        elif settings.UFM_PASSWORD:
            self.base, self.auth = f"{base}/ufmRest", (settings.UFM_USER, settings.UFM_PASSWORD)
            self.headers = {}
        else:
            raise DriverError(
                "the real UFM driver needs GPUAAS_UFM_PASSWORD or GPUAAS_UFM_TOKEN", transient=False
            )

    def _call(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        try:
            response = httpx.request(
                method,
                f"{self.base}/resources/pkeys{path}",
                json=body,
                auth=self.auth,
                headers={**self.headers, **correlation.outbound_headers()},
                verify=outbound.tls(),
                timeout=settings.DRIVER_HTTP_TIMEOUT,
            )
        except httpx.HTTPError as exc:
            raise DriverError(f"UFM unreachable: {exc.__class__.__name__}") from exc
        if response.status_code >= 500:
            raise DriverError(f"UFM answered {response.status_code} to {method} pkeys{path}")
        if response.status_code in (401, 403):
            raise DriverError(f"UFM refused our credentials: {response.status_code}", transient=False)
        return response

    @staticmethod
    def _pkey(pkey: str) -> str:
        try:
            number = int(pkey, 16)
        except ValueError:
            number = 0
        if not 0 < number <= 0x7FFF:
            raise DriverError(f"not a partition key: {pkey!r}", transient=False)
        return f"0x{number:04x}"

    @staticmethod
    def _guids(guids: list[str]) -> list[str]:
        normal = [guid.lower().removeprefix("0x").replace(":", "") for guid in guids]
        bad = [guid for guid, plain in zip(guids, normal, strict=True) if not _GUID.match(plain)]
        if bad:
            raise DriverError(f"not port GUIDs: {', '.join(bad)[:200]}", transient=False, hardware=True)
        return normal

    @staticmethod
    def _refused(response: httpx.Response, what: str) -> DriverError:
        return DriverError(
            f"UFM refused {what}: {response.status_code} {response.text[:200]}", transient=False
        )

    def create_pkey(self, pkey: str) -> None:
        name = self._pkey(pkey)
        if self._call("GET", f"/{name}").status_code == 200:
            return
        response = self._call(
            "POST",
            "/add",
            {"pkey": name, "index0": False, "ip_over_ib": True, "mtu_limit": 4, "service_level": 0},
        )
        if response.status_code >= 400:
            raise self._refused(response, f"creating PKey {name}")

    def add_guids(self, pkey: str, guids: list[str]) -> None:
        name = self._pkey(pkey)
        body = {
            "pkey": name,
            "guids": self._guids(guids),
            "membership": "full",
            "index0": False,
            "ip_over_ib": True,
        }
        response = self._call("POST", "/", body)
        if response.status_code >= 400:
            raise self._refused(response, f"adding GUIDs to PKey {name}")

    def remove_guids(self, pkey: str, guids: list[str]) -> None:
        name = self._pkey(pkey)
        response = self._call("POST", "/delete", {"pkey": name, "guids": self._guids(guids)})
        if response.status_code == 404:
            return  # no such PKey: nothing of ours is in it
        if response.status_code >= 400:
            raise self._refused(response, f"removing GUIDs from PKey {name}")
