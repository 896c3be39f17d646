"""NVIDIA UFM: InfiniBand partition keys (PKeys) and their member port GUIDs."""

from __future__ import annotations

from typing import Protocol

from apps.core import simulation
from apps.core.drivers import load


class Ufm(Protocol):
    def create_pkey(self, pkey: str) -> None: ...
    def add_guids(self, pkey: str, guids: list[str]) -> None: ...
    def remove_guids(self, pkey: str, guids: list[str]) -> None: ...


def driver() -> Ufm:
    # No real UFM driver yet: "real" falls back to the simulation (logged once).
    return load("ufm", {"simulated": "apps.storage.drivers.ufm.SimulatedUfm"})


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
