"""DDN EXAScaler (Lustre): tenant directories with quotas, and NodeMaps that
decide which nodes may mount them."""

from __future__ import annotations

from typing import Protocol

from apps.core import simulation
from apps.core.drivers import DriverError, load

GB = 2**30  # Lustre quotas count binary gigabytes (``lfs setquota -B 10G``)
BASELINE_LATENCY_MS = 2.0


class Ddn(Protocol):
    def create_directory(self, path: str, quota_gb: int) -> None: ...
    def create_nodemap(self, nodemap: str, path: str) -> None: ...
    def add_node(self, nodemap: str, hostname: str) -> None: ...
    def remove_node(self, nodemap: str, hostname: str) -> None: ...
    def set_quota(self, path: str, quota_gb: int) -> None: ...
    def used_bytes(self, path: str) -> int: ...
    def latency_ms(self, path: str) -> float: ...


def driver() -> Ddn:
    # No real DDN driver yet: "real" falls back to the simulation (logged once).
    return load("ddn", {"simulated": "apps.storage.drivers.ddn.SimulatedDdn"})


class SimulatedDdn:
    system = "ddn"

    def create_directory(self, path: str, quota_gb: int) -> None:
        simulation.inject(self.system, "create_directory", path)
        simulation.put(self.system, "directory", path, quota_gb=quota_gb)

    def create_nodemap(self, nodemap: str, path: str) -> None:
        simulation.inject(self.system, "create_nodemap", nodemap)
        if simulation.get(self.system, "nodemap", nodemap) is None:
            simulation.put(self.system, "nodemap", nodemap, path=path, nodes=[])

    def add_node(self, nodemap: str, hostname: str) -> None:
        simulation.inject(self.system, "add_node", hostname)
        with simulation.locked(self.system, "nodemap", nodemap) as resource:
            if resource is None:
                raise DriverError(f"DDN has no NodeMap {nodemap}", transient=False)
            simulation.update(resource, nodes=sorted(set(resource.state["nodes"]) | {hostname}))

    def remove_node(self, nodemap: str, hostname: str) -> None:
        simulation.inject(self.system, "remove_node", hostname)
        with simulation.locked(self.system, "nodemap", nodemap) as resource:
            if resource is not None:
                simulation.update(resource, nodes=sorted(set(resource.state["nodes"]) - {hostname}))

    def set_quota(self, path: str, quota_gb: int) -> None:
        simulation.inject(self.system, "set_quota", path)
        with simulation.locked(self.system, "directory", path) as resource:
            if resource is None:
                raise DriverError(f"DDN has no directory {path}", transient=False)
            simulation.update(resource, quota_gb=quota_gb)

    def used_bytes(self, path: str) -> int:
        """What the tenant's files take; the simulated world fills a directory only when
        a drill or test says so (``used_bytes`` in its state)."""
        simulation.inject(self.system, "used_bytes", path)
        resource = simulation.get(self.system, "directory", path)
        if resource is None:
            raise DriverError(f"DDN has no directory {path}", transient=False)
        return int(resource.state.get("used_bytes", 0))

    def latency_ms(self, path: str) -> float:
        """How long the file system takes to answer in the tenant's directory (EXAScaler's
        monitoring reports it per file system); the simulated world's is a healthy
        ``BASELINE_LATENCY_MS`` unless a drill or test holds another (``latency_ms``)."""
        simulation.inject(self.system, "latency_ms", path)
        resource = simulation.get(self.system, "directory", path)
        if resource is None:
            raise DriverError(f"DDN has no directory {path}", transient=False)
        return float(resource.state.get("latency_ms", BASELINE_LATENCY_MS))
