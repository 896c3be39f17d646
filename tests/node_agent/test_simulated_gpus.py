"""The simulated world's GPUs, as the agent reads them on a node without NVIDIA
GPUs: idle and busy curves, readings ``simulate_gpu`` holds, and XID errors."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from node_agent.telemetry import H100_MEMORY_MIB, DcgmCollector, SimulatedGpus, gpu_uuid


def settle(gpus: SimulatedGpus, busy: bool, rounds: int = 8) -> list[dict]:
    for moment in range(rounds):
        readings = gpus.read(busy, now=1_000_000 + 15 * moment)
    return readings


def test_idle_gpus_are_cool_and_busy_ones_work_hot():
    gpus = SimulatedGpus("gpu-1")
    idle = settle(gpus, busy=False)
    assert len(idle) == 8
    assert all(r["utilization"] < 5 and r["temperature"] < 36 and r["power"] < 110 for r in idle)
    assert all(r["memory_used"] < 1000 for r in idle)
    busy = settle(gpus, busy=True)
    assert all(r["utilization"] > 70 and r["temperature"] > 60 and r["power"] > 450 for r in busy)
    assert all(r["memory_used"] + r["memory_free"] == H100_MEMORY_MIB for r in busy)
    assert [r["uuid"] for r in busy] == [gpu_uuid("gpu-1", i) for i in range(8)]


def test_held_readings_replace_the_curves_on_their_gpus():
    gpus = SimulatedGpus("gpu-1")
    gpus.configure(4, {"all": {"utilization": 10}, "2": {"temperature": 95, "memory": 50}})
    readings = gpus.read(busy=True)
    assert len(readings) == 4
    assert {r["utilization"] for r in readings} == {10}
    assert (readings[2]["temperature"], readings[2]["memory_used"]) == (95, round(H100_MEMORY_MIB / 2))
    assert readings[1]["temperature"] < 95


def test_an_xid_is_an_event_when_it_appears_and_stays_in_the_gauge():
    gpus = SimulatedGpus("gpu-1")
    gpus.configure(2, {"1": {"xid": 79}})
    first = gpus.read(busy=False)
    [event] = gpus.xids(first)
    assert (event["gpu"], event["code"]) == (1, 79)
    assert gpus.xids(gpus.read(busy=False)) == []  # still held: no new event
    collector = DcgmCollector("gpu-1")
    collector.readings = first
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    page = generate_latest(registry).decode()
    labels = f'Hostname="gpu-1",UUID="{gpu_uuid("gpu-1", 1)}",device="nvidia1",gpu="1"'
    assert f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 79.0" in page
    gpus.configure(2, {"1": {"xid": 48}})
    assert [e["code"] for e in gpus.xids(gpus.read(busy=False))] == [48]
