"""GPU telemetry: read each GPU (NVML on a node with NVIDIA GPUs, the simulated
world elsewhere), serve the readings in the DCGM exporter's form for a
Prometheus-compatible scraper, and report them (with XID errors) to the platform.

The platform's answer to each report says whether it wants the readings (only
when it keeps them itself: with a metrics database it scrapes the endpoint
instead), where to serve the endpoint (the address the agent enrolled from, as
the agent's other ports) and, for the simulated world, the node's GPU count and
the readings ``simulate_gpu`` holds.

With each report goes the node's own CPU and memory utilization, read from
``/proc`` (for the platform's ``cpu_utilization`` and ``memory_utilization`` alert
rules); in the simulated world ``simulate_gpu --cpu/--node-memory`` holds them.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger(__name__)

# The DCGM exporter's series (CONTRACT "Monitoring and alerts") and the reading behind each.
SERIES = (
    ("DCGM_FI_DEV_GPU_UTIL", "utilization", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "memory_used", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "memory_free", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power", "Power draw (in W)."),
    ("DCGM_FI_DEV_XID_ERRORS", "xid", "Value of the last XID error encountered."),
)
INTERVAL_SECONDS = 15.0
H100_MEMORY_MIB = 81559
# The node's readings in a report, as the platform's alert metrics name them.
NODE_READINGS = ("cpu_utilization", "memory_utilization")


class SimulatedGpus:
    """Plausible H100 readings: idle near 0 % and 30 C, busy (while the node runs a
    workload) near 90 % with a slow swell, temperature and power following the
    load; readings ``simulate_gpu`` holds replace the curves until cleared."""

    def __init__(self, hostname: str, gpus: int = 8):
        self.hostname, self.gpus, self.held = hostname, gpus, {}
        self._load: dict[int, float] = {}
        self._xid_seen: dict[int, int] = {}

    def configure(self, gpus: int, held: dict) -> None:
        self.gpus, self.held = gpus, held

    def read(self, busy: bool, now: float | None = None) -> list[dict]:
        now = time.time() if now is None else now
        return [self._gpu(index, busy, now) for index in range(self.gpus)]

    def _gpu(self, index: int, busy: bool, now: float) -> dict:
        phase = index * 0.7
        target = (
            88 + 8 * math.sin(now / 240 + phase) + random.uniform(-3, 3) if busy else random.uniform(0, 2)
        )
        # Load ramps rather than jumps, as a real job's does.
        load = self._load.get(index, target)
        load = self._load[index] = load + (target - load) * 0.6
        held = {**self.held.get("all", {}), **self.held.get(str(index), {})}
        utilization = float(held.get("utilization", load))
        used = H100_MEMORY_MIB * (0.72 + 0.04 * math.sin(now / 600 + phase)) if busy else 450.0 + 5 * index
        if "memory" in held:
            used = H100_MEMORY_MIB * float(held["memory"]) / 100
        return {
            "gpu": index,
            "uuid": gpu_uuid(self.hostname, index),
            "at": now,
            "utilization": round(max(0.0, min(100.0, utilization)), 1),
            "memory_used": round(used),
            "memory_free": round(H100_MEMORY_MIB - used),
            "temperature": round(
                float(held.get("temperature", 31 + 0.45 * load + random.uniform(-0.5, 0.5))), 1
            ),
            "power": round(70 + 6.2 * utilization + random.uniform(-4, 4), 1),
            "xid": int(held.get("xid", 0)),
        }

    def xids(self, readings: list[dict]) -> list[dict]:
        """An XID event each time a GPU's held code appears or changes."""
        events = []
        for reading in readings:
            code, index = reading["xid"], reading["gpu"]
            if code and self._xid_seen.get(index) != code:
                events.append({"gpu": index, "uuid": reading["uuid"], "code": code, "at": reading["at"]})
            self._xid_seen[index] = code
        return events


def gpu_uuid(hostname: str, index: int) -> str:
    """A simulated GPU's UUID: stable for the node and index, shaped like NVIDIA's."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{index}.{hostname}.gpuaas.sim')}"


class NvmlGpus:
    """The node's NVIDIA GPUs through NVML (``nvidia-ml-py``)."""

    def __init__(self, nvml):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.events = nvml.nvmlEventSetCreate()
        self._last_xid: dict[int, int] = {}
        for handle in self.handles:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self.events)
            except nvml.NVMLError as exc:  # some GPUs (and vGPUs) do not report XIDs
                logger.warning("XID events unavailable: %s", exc)

    def read(self, busy: bool, now: float | None = None) -> list[dict]:
        nvml, now = self.nvml, time.time() if now is None else now
        readings = []
        for index, handle in enumerate(self.handles):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            readings.append(
                {
                    "gpu": index,
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "at": now,
                    "utilization": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                    "memory_used": memory.used / 2**20,
                    "memory_free": memory.free / 2**20,
                    "temperature": float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
                    "power": nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                    "xid": self._last_xid.get(index, 0),
                }
            )
        return readings

    def xids(self, readings: list[dict]) -> list[dict]:
        events = []
        while True:
            try:
                data = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError_Timeout:
                return events
            index = self.nvml.nvmlDeviceGetIndex(data.device)
            self._last_xid[index] = int(data.eventData)
            uuid_ = next((r["uuid"] for r in readings if r["gpu"] == index), "")
            events.append({"gpu": index, "uuid": uuid_, "code": int(data.eventData), "at": time.time()})


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def open_gpus(hostname: str):
    """NVML when the node has NVIDIA GPUs and the library, the simulated world otherwise."""
    try:
        import pynvml
    except ImportError:
        return SimulatedGpus(hostname)
    try:
        gpus = NvmlGpus(pynvml)
    except pynvml.NVMLError:
        return SimulatedGpus(hostname)
    if not gpus.handles:
        return SimulatedGpus(hostname)
    logger.info("reading %d GPUs through NVML", len(gpus.handles))
    return gpus


def cpu_times(stat: str) -> tuple[int, int] | None:
    """Idle and total CPU time (in ticks, all CPUs) from ``/proc/stat``'s ``cpu`` line:
    user nice system idle iowait irq softirq steal (guest time is already in user)."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(value) for value in fields[1:9]]
            return sum(ticks[3:5]), sum(ticks)  # idle and iowait: waiting, not working
    return None


def memory_utilization(meminfo: str) -> float | None:
    """Percent of memory not available to new work (``MemAvailable`` counts reclaimable
    cache as free, as ``free`` does) from ``/proc/meminfo``."""
    sizes = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable") and rest.split():
            sizes[name] = int(rest.split()[0])
    total, available = sizes.get("MemTotal"), sizes.get("MemAvailable")
    if not total or available is None:
        return None
    return round(100.0 * (1 - min(available, total) / total), 1)


class NodeUsage:
    """The node's CPU utilization over the time since the previous read (the first
    read measures from construction) and its memory utilization, in %; what cannot be
    read (no ``/proc``, as off Linux) is left out."""

    def __init__(self, proc: Path = Path("/proc")):
        self.proc = proc
        self._last = self._cpu_times()

    def read(self) -> dict:
        usage = {}
        times = self._cpu_times()
        if times and self._last and times[1] > self._last[1]:
            idle, total = times[0] - self._last[0], times[1] - self._last[1]
            usage["cpu_utilization"] = round(max(0.0, min(100.0, 100.0 * (1 - idle / total))), 1)
        self._last = times or self._last
        memory = memory_utilization(self._text("meminfo"))
        if memory is not None:
            usage["memory_utilization"] = memory
        return usage

    def _cpu_times(self) -> tuple[int, int] | None:
        return cpu_times(self._text("stat"))

    def _text(self, name: str) -> str:
        try:
            return (self.proc / name).read_text()
        except OSError:
            return ""


class DcgmCollector:
    """The latest readings as the DCGM exporter names and labels them."""

    def __init__(self, hostname: str):
        self.hostname = hostname
        self.readings: list[dict] = []

    def collect(self):
        for name, key, help_text in SERIES:
            family = GaugeMetricFamily(name, help_text, labels=["gpu", "UUID", "device", "Hostname"])
            for r in self.readings:
                family.add_metric([str(r["gpu"]), r["uuid"], f"nvidia{r['gpu']}", self.hostname], r[key])
            yield family


class Telemetry:
    """The agent's telemetry loop: read, serve, report."""

    def __init__(self, client, hostname: str, busy: Callable[[], bool], *, port: int = 9400, gpus=None):
        self.client, self.busy, self.port = client, busy, port
        self.gpus = gpus or open_gpus(hostname)
        self.node = NodeUsage()
        self.node_held: dict = {}  # the simulated world's node readings simulate_gpu holds
        self.collector = DcgmCollector(hostname)
        self.interval, self.report_readings = INTERVAL_SECONDS, True
        self.server = None
        self._pending_xids: list[dict] = []

    def loop(self, stopping: threading.Event, guarded) -> None:
        while True:
            guarded(self.once)
            if stopping.wait(self.interval):
                break
        if self.server is not None:
            self.server.shutdown()

    def once(self) -> None:
        readings = self.gpus.read(self.busy())
        self.collector.readings = readings
        # Kept until the platform has them: a report lost to a restart is sent again.
        self._pending_xids = (self._pending_xids + self.gpus.xids(readings))[-64:]
        sent = [{k: v for k, v in r.items() if k != "xid"} for r in readings] if self.report_readings else []
        config = self.client.telemetry(
            readings=sent,
            xids=self._pending_xids,
            exporter_port=self.server.server_port if self.server else None,
            simulated=isinstance(self.gpus, SimulatedGpus),
            node={**self.node.read(), **self.node_held},
        )
        self._pending_xids = []
        self.interval = float(config.get("interval_seconds") or INTERVAL_SECONDS)
        self.report_readings = bool(config.get("report_readings", True))
        if "gpus" in config:
            held = config.get("held") or {}
            self.gpus.configure(int(config["gpus"]), held)
            node_held = held.get("node") or {}
            self.node_held = {name: float(node_held[name]) for name in NODE_READINGS if name in node_held}
        if self.server is None and config.get("address"):
            self._serve(config["address"])

    def _serve(self, address: str) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        self.server, _ = start_http_server(self.port, addr=address, registry=registry)
        logger.info("DCGM-form metrics on %s port %d", address, self.server.server_port)
